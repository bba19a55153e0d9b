# test/perl/LockqProxy.pm
#
# A TCP proxy on 127.0.0.1 for fault tests: it forwards to a server port
# until told otherwise, by signal:
#   USR1  black hole: accept connections and read everything, forward
#         nothing, close nothing (a host that vanished without a reset)
#   USR2  lost replies: forward requests, drop every answer
#   WINCH cut in the reply: forward requests; the next answer is dropped
#         and both of its connection's sockets are closed (a reset in the
#         middle of the reply), then forward again
#   PROF  delay: forward everything, each way, a second late (a slow or
#         congested path; the order of the bytes is kept)
#   HUP   forward again
# start_proxy(port[, route_file]) returns (pid, listen port); with a
# route file, each new connection goes to the port that file holds, if it
# exists (a load balancer that follows the primary, as HAProxy does with
# Patroni's health checks).  stop_proxy(pid) ends it.
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

package LockqProxy;

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes ();

use Exporter 'import';
our @EXPORT = qw(start_proxy stop_proxy);

sub start_proxy
{
	my ($target_port, $route_file) = @_;
	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Listen => 128,
		ReuseAddr => 1) or die "proxy: listen: $!";
	my $port = $listen->sockport;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid)
	{
		close $listen;
		return ($pid, $port);
	}

	my $mode = 'pass';
	$SIG{USR1} = sub { $mode = 'hole' };
	$SIG{USR2} = sub { $mode = 'noreply' };
	$SIG{WINCH} = sub { $mode = 'cut' };
	$SIG{PROF} = sub { $mode = 'delay' };
	$SIG{PIPE} = 'IGNORE';
	$SIG{HUP} = sub { $mode = 'pass' };
	my $delay = 1.0;
	my @late;    # [ due, socket, bytes ], in the order they came
	$SIG{TERM} = sub { POSIX::_exit(0) };
	my $sel = IO::Select->new($listen);
	my (%peer, %up);
	while (1)
	{
		my $wait = 0.05;
		$wait = $late[0][0] - Time::HiRes::time() if @late && $late[0][0] - Time::HiRes::time() < $wait;
		for my $s ($sel->can_read($wait > 0 ? $wait : 0))
		{
			if ($s == $listen)
			{
				my $c = $listen->accept or next;
				$sel->add($c);
				if ($mode eq 'hole')
				{
					$peer{$c} = undef;	# never connected on
					next;
				}
				my $to = $target_port;
				if ($route_file && open(my $r, '<', $route_file))
				{
					my $line = <$r>;
					close $r;
					$to = $1 if defined $line && $line =~ /^(\d+)/;
				}
				my $u = IO::Socket::INET->new(
					PeerAddr => '127.0.0.1',
					PeerPort => $to);
				if (!$u)
				{
					$sel->remove($c);
					close $c;
					next;
				}
				$peer{$c} = $u;
				$peer{$u} = $c;
				$up{$c} = 1;
				$sel->add($u);
				next;
			}
			my $buf;
			my $n = sysread($s, $buf, 65536);
			if (!$n)
			{
				$sel->remove($s);
				my $p = $peer{$s};
				delete $peer{$s};
				close $s;
				# a black hole passes no close on either
				if ($p && $mode ne 'hole')
				{
					$sel->remove($p);
					delete $peer{$p};
					close $p;
				}
				next;
			}
			next if $mode eq 'hole';
			next if $mode eq 'noreply' && !$up{$s};
			my $p = $peer{$s} or next;
			if ($mode eq 'cut' && !$up{$s})
			{
				$sel->remove($s);
				$sel->remove($p);
				delete $peer{$s};
				delete $peer{$p};
				close $s;
				close $p;
				$mode = 'pass';
				next;
			}
			if ($mode eq 'delay' || @late)
			{
				push @late, [ Time::HiRes::time() + $delay, $p, $buf ];
				next;
			}
			syswrite($p, $buf);
		}
		while (@late && $late[0][0] <= Time::HiRes::time())
		{
			my (undef, $p, $buf) = @{ shift @late };
			syswrite($p, $buf) if defined fileno($p);
		}
	}
}

sub stop_proxy
{
	my ($pid) = @_;
	kill 'TERM', $pid;
	waitpid($pid, 0);
}

1;
