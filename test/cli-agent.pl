# test/cli-agent.pl LOCKQ CONNINFO DIR
#
# The fault matrix's agent (test/t/309_client_matrix.pl) for the lockq CLI,
# with the commands of client/python/tools/agent.py.  "acquire" starts
# lockq run, whose command is the protected work: it writes the wall clock
# (ns) to a file every 2 ms; the work's last line is what it did under the
# lease.  "acquired TOKEN PID" names lockq's pid (the client process);
# when lockq exits after acquiring, "stopped LAST_WORK_NS" (or, after
# "release", "released 1|0 ELAPSED_MS"); when it exits without acquiring,
# "failed timeout|exitN ELAPSED_MS".  "cancel LOCK TTL_MS DELAY_MS" runs
# lockq run LOCK -- true and sends lockq SIGINT (^C) DELAY_MS later:
# "cancel_done cancelled|acquired|exitN ELAPSED_MS" (130: cancelled; 0: the
# grant came first, true ran, and the lock was released).  "ping" takes a
# lock of its own with --no-wait: "pong ok" or "pong exitN".
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use IO::Select;
use Time::HiRes qw(time);

$| = 1;
my ($lockq, $dsn, $dir) = @ARGV;

# lockq must be born with SIGINT's default action: "cancel" counts on a ^C
# that comes before lockq has set its handlers killing it.  A test run
# started as a background job of a non-interactive shell ("make check &")
# ignores SIGINT (and SIGQUIT), and an ignored disposition is inherited
# through fork and exec: such a ^C was discarded by the kernel, and lockq,
# its handlers set later, waited for the lock forever.  Set here, before
# any fork, so that no child has an ignoring moment.
$SIG{INT} = 'DEFAULT';
my ($pid, $out, $file, $t0, $acquired, $releasing);
my $sel = IO::Select->new(\*STDIN);
my ($inbuf, $outbuf) = ('', '');

sub last_work
{
	open(my $f, '<', $file) or return 0;
	my @l = <$f>;
	close $f;
	chomp(my $last = $l[-1] // '0');
	return $last;
}

sub lockq_ended
{
	waitpid($pid, 0);
	my $rc = $? >> 8;
	my $ms = int((time() - $t0) * 1000);
	if ($releasing)
	{
		print "released ", ($rc == 0 ? 1 : 0), " $ms\n";
	}
	elsif ($acquired)
	{
		print "stopped ", last_work(), "\n";
	}
	else
	{
		print "failed ", ($rc == 75 ? 'timeout' : "exit$rc"), " $ms\n";
	}
	$sel->remove($out);
	close $out;
	($pid, $acquired, $releasing) = (undef, 0, 0);
}

while (1)
{
	for my $fh ($sel->can_read(0.5))
	{
		my $n = sysread($fh, my $buf, 4096);
		if ($fh == \*STDIN)
		{
			exit 0 unless $n;
			$inbuf .= $buf;
			while ($inbuf =~ s/^(.*)\n//)
			{
				my @cmd = split ' ', $1;
				if ($cmd[0] eq 'acquire')
				{
					my ($lock, $ttl, $timeout) = @cmd[1 .. 3];
					$file = "$dir/$lock.work";
					unlink $file, "$file.stop";
					pipe($out, my $w) or die "pipe: $!";
					$t0 = time();
					$pid = fork();
					die "fork: $!" unless defined $pid;
					if ($pid == 0)
					{
						close $out;
						open(STDOUT, '>&', $w) or die;
						exec($lockq, 'run', '-d', $dsn, '--ttl', ($ttl / 1000) . 's',
							($timeout >= 0 ? ('--timeout', ($timeout / 1000) . 's') : ()),
							$lock, '--', 'sh', '-c',
							"echo acquired \$LOCKQ_TOKEN; while [ ! -e $file.stop ]; do date +%s%N >> $file; sleep 0.002; done")
						  or exit 127;
					}
					close $w;
					$sel->add($out);
				}
				elsif ($cmd[0] eq 'release')
				{
					$releasing = 1;
					open(my $f, '>', "$file.stop") or die;
					close $f;
				}
				elsif ($cmd[0] eq 'cancel')
				{
					my ($lock, $ttl, $delay) = @cmd[1 .. 3];
					$t0 = time();
					my $p = fork();
					die "fork: $!" unless defined $p;
					if ($p == 0)
					{
						exec($lockq, 'run', '-d', $dsn, '--ttl', ($ttl / 1000) . 's', $lock, '--', 'true')
						  or exit 127;
					}
					Time::HiRes::sleep($delay / 1000);
					kill 'INT', $p;
					waitpid($p, 0);
					my $rc = ($? & 127) ? 'signal' . ($? & 127) : $? >> 8;
					printf "cancel_done %s %d\n",
					  ($rc eq '130' ? 'cancelled' : $rc eq '0' ? 'acquired' : "exit$rc"),
					  (time() - $t0) * 1000;
				}
				elsif ($cmd[0] eq 'ping')
				{
					system($lockq, 'run', '-d', $dsn, '--no-wait', "agent-ping-$$", '--', 'true');
					print 'pong ', ($? == 0 ? 'ok' : 'exit' . ($? >> 8)), "\n";
				}
				elsif ($cmd[0] eq 'quit')
				{
					kill 'KILL', $pid if $pid;
					exit 0;
				}
			}
		}
		else
		{
			if (!$n)
			{
				lockq_ended();
				next;
			}
			$outbuf .= $buf;
			if (!$acquired && $outbuf =~ /^acquired (\d+)$/m)
			{
				$acquired = 1;
				print "acquired $1 $pid\n";
			}
		}
	}
}
