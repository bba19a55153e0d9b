#!/usr/bin/perl
#
# test/torture/check_history.pl -- checks the histories of a lockq_torture
# run (client/test/lockq_torture.c) against lockq's invariants I1-I4.
#
#   check_history.pl [--nemesis FILE] [--max-report N] [--context SECONDS]
#                    HISTORY...
#   check_history.pl --selftest DIR
#
# Reads every history file (one per worker; any file may hold any worker's
# lines), and the nemesis log (the faults and when they happened, and the
# final fenced-write counters).  Prints every violation with the events
# involved and the faults near them, then a line "STATS key=value ...".
# Exit status: 0 no violation, 1 violations, 2 bad input.
#
# --selftest DIR checks each DIR/*.tsv (hand-written histories, each with a
# line "# expect: CODE,CODE" or "# expect: none") and prints ok / not ok for
# each: the violations found must be exactly the ones expected.
#
# The rules, what the client can know and why they are sound, are in
# test/torture/README.md.  In short (times are the clients'
# CLOCK_MONOTONIC; "inv" is the time a call was sent, "done" when its
# answer came; only "ok" answers are information, "fail" and "info" calls
# may or may not have taken effect, except a lockq_heartbeat that failed,
# which ends a waiter's proof of a continuous place in the queue):
#
#   I1  death(T) is the first of: release(T) = t, lockqc_unlock(T) = OK,
#       holds(T) = f, renew(T) or release(T) = f by T's owner, and a larger
#       token of the same lock shown to anyone.  A call invoked after
#       death(T) must not get holds(T) = t, renew(T) = t, release(T) = t, or
#       T as a grant.                                            (code I1)
#   I2  each grant T has a belief end e(T): the holder's own reckoning
#       (max over its confirmed grant and renewal calls of inv + ttl), cut
#       at the holder's first release, unlock or cancel; for session-bound
#       grants also cut at the session's end (close, or when broken: the
#       inv of the last call the session answered); for liblockq grants,
#       the last lockqc_held() = true.  A larger token T' of the same lock
#       must not be shown before e(T).                           (code I2)
#       Fenced writes committed on one lock must be in token order, and
#       none may be lost (n unique, final counter >= every n).  (code I2F)
#   I3  a token is shown to one (lock, owner) only (I3D); a grant whose
#       answer came before another grant was asked for has the smaller
#       token (I3O); lockq_now() read after another reading returned is
#       larger (I3N).
#   I4  a client-side waiter whose enqueue answered "queued" and whose
#       heartbeats never failed until one returned its token was queued
#       all along; a grant asked for after that answer must have a larger
#       token.                                                   (code I4)
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).
use strict;
use warnings;

use File::Basename qw(basename);
use Getopt::Long;

my %NAME = (
	I1 => 'I1 fence not monotonic',
	I2 => 'I2 exclusion',
	I2F => 'I2 fenced writes out of order or lost',
	I3D => 'I3 token reissued',
	I3O => 'I3 tokens not increasing',
	I3N => 'I3 lockq_now() went back',
	I4 => 'I4 FIFO order',
	LEASE => 'lease longer than asked',);

my %GRANT_F = map { $_ => 1 } qw(get try enqueue heartbeat lock trylock);
my %ACQ_F = map { $_ => 1 } qw(get try enqueue lock trylock);

# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

# read_histories(files) returns { ops => [...], metas => [...] }; dies with
# a message on malformed input.
sub read_histories
{
	my (@files) = @_;
	my (%open, @ops, @metas, @expect);
	for my $file (@files)
	{
		open(my $fh, '<', $file) or die "cannot open $file: $!\n";
		my $base = basename($file);
		while (my $line = <$fh>)
		{
			# a workload that was killed may leave half a line at the end
			if ($line !~ /\n\z/ && eof($fh))
			{
				print STDERR "$base:$.: ignoring a truncated last line\n";
				last;
			}
			chomp $line;
			if ($line =~ /^#\s*expect:\s*(.*?)\s*$/)
			{
				push @expect, grep { $_ ne '' && $_ ne 'none' } split /[\s,]+/, $1;
				next;
			}
			next if $line =~ /^#/ || $line =~ /^\s*$/;
			my @f = split /\t/, $line, -1;
			die "$base:$.: expected 12 tab-separated fields, got " . scalar(@f) . "\n"
			  unless @f == 12;
			my ($t, $proc, $inc, $id, $type, $fn, $lock, $owner, $ttl, $tok, $val, $note) =
			  map { $_ eq '-' ? undef : $_ } @f;
			# lockq_await is a heartbeat that may wait in the backend for the
			# grant: the same answers (NULL, the token, 55000), the same rules
			$fn = 'heartbeat' if defined $fn && $fn eq 'await';
			die "$base:$.: bad time\n" unless defined $t && $t =~ /^\d+$/;
			my $src = "$base:$.";
			if ($type eq 'meta')
			{
				push @metas,
				  { t => $t, proc => $proc, inc => $inc, f => $fn, owner => $owner,
					value => $val, note => $note, src => $src };
				next;
			}
			my $key = "$proc#$id";
			if ($type eq 'invoke')
			{
				my $op = {
					proc => $proc, inc => $inc, id => $id, f => $fn, lock => $lock,
					owner => $owner, ttl => $ttl, token => $tok, inv => $t,
					type => 'open', done => undef, value => undef, src => $src };
				$open{$key} = $op;
				push @ops, $op;
			}
			elsif ($type =~ /^(ok|fail|info)$/)
			{
				my $op = delete $open{$key}
				  or die "$base:$.: completion of $key without an invoke\n";
				$op->{type} = $type;
				$op->{done} = $t;
				$op->{value} = $val;
				$op->{note} = $note;
				$op->{token} //= $tok;
				$op->{src} .= ",$.";
				die "$base:$.: completion before invoke\n" if $t < $op->{inv};
			}
			else
			{
				die "$base:$.: unknown type $type\n";
			}
		}
		close $fh;
	}
	# calls never answered (the run was cut short): unknown outcome
	$_->{done} = 9**18 for values %open;
	return { ops => \@ops, metas => \@metas, expect => \@expect };
}

# read_nemesis(file) returns the faults and the final counters.
sub read_nemesis
{
	my ($file) = @_;
	my (@faults, %final);
	return (\@faults, \%final) unless defined $file;
	open(my $fh, '<', $file) or die "cannot open $file: $!\n";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line =~ /^#/ || $line =~ /^\s*$/;
		my ($t0, $t1, $kind, $detail) = split /\t/, $line, 4;
		if ($kind eq 'final')
		{
			my ($lock, $n) = split / /, $detail;
			$final{$lock} = $n;
			next;
		}
		push @faults, { t0 => $t0, t1 => $t1, kind => $kind, detail => $detail // '' };
	}
	close $fh;
	return (\@faults, \%final);
}

# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------

# check(history, faults, final) returns (violations, stats).
sub check
{
	my ($h, $faults, $final) = @_;
	my @ops = @{ $h->{ops} };
	my @metas = @{ $h->{metas} };
	my (@v, %stats);

	my $viol = sub {
		my ($code, $msg, @events) = @_;
		push @v, { code => $code, msg => $msg, events => [ grep { defined } @events ] };
	};

	for my $op (@ops)
	{
		$stats{ops}++;
		$stats{ $op->{type} }++;
	}

	# --- tokens shown (I3D), and their first showing ---------------------
	my %tok;
	my @shows = sort { $a->{done} <=> $b->{done} }
	  grep {
		$_->{type} eq 'ok' && $GRANT_F{ $_->{f} } && defined $_->{value}
		  && $_->{value} =~ /^\d+$/
	  } @ops;
	for my $op (@shows)
	{
		my $T = $op->{value};
		my $t = $tok{$T};
		if (!$t)
		{
			$tok{$T} = {
				token => $T, lock => $op->{lock}, owner => $op->{owner}, first => $op,
				shows => [$op], lib => ($op->{f} =~ /lock$/ ? 1 : 0) };
			next;
		}
		if ($t->{lock} ne $op->{lock} || ($t->{owner} // '') ne ($op->{owner} // ''))
		{
			$viol->('I3D', "token $T was shown to $t->{owner} on $t->{lock} and again to "
				  . ($op->{owner} // '?') . " on $op->{lock}",
				$t->{first}, $op);
			next;
		}
		push @{ $t->{shows} }, $op;
	}
	$stats{grants} = scalar keys %tok;

	# the calls of each owner on each lock, in order
	my %by_owner;
	for my $op (sort { $a->{inv} <=> $b->{inv} } @ops)
	{
		next unless defined $op->{owner} && defined $op->{lock};
		push @{ $by_owner{"$op->{owner}\0$op->{lock}"} }, $op;
	}
	my %by_token;
	for my $op (@ops)
	{
		push @{ $by_token{ $op->{token} } }, $op if defined $op->{token};
	}

	# --- sessions: when a session-bound holder last knew its session alive
	my (%sess_of, %sess);
	for my $m (@metas)
	{
		my $k = "$m->{proc}/$m->{inc}";
		if ($m->{f} eq 'conn' && defined $m->{owner})
		{
			$sess_of{ $m->{owner} } = $k;
			$sess{$k} //= { last_answered => undef, broken => 0, closed => undef };
		}
		elsif ($m->{f} eq 'lost')
		{
			$sess{$k}{broken} = 1;
		}
		elsif ($m->{f} eq 'close' || $m->{f} eq 'end')
		{
			$sess{$k}{closed} //= $m->{t};
		}
	}
	for my $op (@ops)
	{
		my $k = "$op->{proc}/$op->{inc}";
		my $s = $sess{$k} or next;
		if ($op->{type} eq 'ok' || $op->{type} eq 'fail')
		{
			$s->{last_answered} = $op->{inv}
			  if !defined $s->{last_answered} || $op->{inv} > $s->{last_answered};
		}
		else
		{
			$s->{broken} = 1;
		}
	}

	# --- creation interval, belief end, death, for each token -----------
	for my $T (keys %tok)
	{
		my $t = $tok{$T};
		my $first = $t->{first};
		my $list = $by_owner{"$t->{owner}\0$t->{lock}"} // [];

		# c_lo: the first acquisition by this owner on this lock since it
		# was last shown another token
		my $barrier = -1;
		for my $op (@$list)
		{
			last if $op->{inv} >= $first->{inv};
			$barrier = $op->{done}
			  if $op->{type} eq 'ok' && $GRANT_F{ $op->{f} } && defined $op->{value}
			  && $op->{value} =~ /^\d+$/ && $op->{value} != $T && $op->{done} > $barrier;
		}
		my $c_lo = $first->{inv};
		for my $op (@$list)
		{
			last if $op->{inv} > $first->{inv};
			if ($ACQ_F{ $op->{f} } && $op->{inv} > $barrier)
			{
				$c_lo = $op->{inv};
				last;
			}
		}
		$t->{c_lo} = $c_lo;
		$t->{c_hi} = $first->{done};

		# the holder's own reckoning, call by call in the order they were
		# sent (one holder, one call at a time): a grant, a re-entrant
		# acquisition or a holder's heartbeat extends the lease to at least
		# inv + ttl; lockq_renew sets it to inv + ttl (it can shorten it);
		# a renewal whose answer was lost may have done so.  e_at counts
		# only the calls sent before a given time.
		my @ext;
		for my $op (@{ $t->{shows} }, grep {
				$_->{f} eq 'renew' && ($_->{owner} // '') eq $t->{owner}
				  && ($_->{lock} // '') eq $t->{lock}
				  && !($_->{type} eq 'ok' && ($_->{value} // '') eq 'f')
			} @{ $by_token{$T} // [] })
		{
			push @ext, $op if defined $op->{ttl};
		}
		my ($lb, $lb_op, $max);
		my @steps;
		for my $op (sort { $a->{inv} <=> $b->{inv} } @ext)
		{
			my $end = $op->{inv} + $op->{ttl} * 1_000_000;
			if ($op->{f} ne 'renew')
			{
				($lb, $lb_op) = ($end, $op) if !defined $lb || $end > $lb;
			}
			elsif ($op->{type} eq 'ok')
			{
				($lb, $lb_op) = ($end, $op);
			}
			elsif (defined $lb && $end < $lb)
			{
				($lb, $lb_op) = ($end, $op);
			}
			next unless defined $lb;
			push @steps, [ $op->{inv}, $lb, $lb_op ];
			$max = $lb if !defined $max || $lb > $max;
		}
		$t->{ext} = \@steps;
		$t->{reckon} = $max;

		# the holder stops relying on it when it releases, unlocks or cancels
		my ($rel, $rel_op);
		for my $op (@$list)
		{
			next if $op->{inv} < $first->{inv};
			if (   (($op->{f} eq 'release' || $op->{f} eq 'unlock') && ($op->{token} // 0) == $T)
				|| ($op->{f} eq 'cancel' && $op->{inv} > $first->{done}))
			{
				($rel, $rel_op) = ($op->{inv}, $op);
				last;
			}
		}
		$t->{cap} = [ $rel, 'released', $rel_op ] if defined $rel;

		if ($t->{lib})
		{
			# liblockq: the library's own lease deadline; the last time it
			# said the lock was held
			my ($e, $e_op);
			for my $op (@{ $by_token{$T} // [] })
			{
				next
				  unless $op->{f} eq 'held' && $op->{type} eq 'ok' && ($op->{value} // '') eq 't';
				next if defined $rel && $op->{inv} > $rel;
				($e, $e_op) = ($op->{inv}, $op) if !defined $e || $op->{inv} > $e;
			}
			$t->{lib_e} = [ $e, 'lockqc_held() = true', $e_op ] if defined $e;
		}
		elsif ($t->{owner} =~ /^session:/)
		{
			my $k = $sess_of{ $t->{owner} };
			my $s = defined $k ? $sess{$k} : undef;
			my $cut;
			if ($s && $s->{broken})
			{
				$cut = [ $s->{last_answered} // $first->{inv}, 'its session, last known alive', undef ];
			}
			elsif ($s && defined $s->{closed})
			{
				$cut = [ $s->{closed}, 'its session closed', undef ];
			}
			$t->{cap} = $cut
			  if defined $cut && (!defined $t->{cap} || $cut->[0] < $t->{cap}[0]);
		}
		my ($e) = e_at($t, 9**18);
		$stats{windows}++ if defined $e && $e > $first->{done};
	}

	# --- I1: death, and what may not follow it --------------------------
	my %death;    # token => [time, op, why]
	my $dead = sub {
		my ($T, $time, $op, $why) = @_;
		$death{$T} = [ $time, $op, $why ]
		  if !$death{$T} || $time < $death{$T}[0];
	};
	for my $op (@ops)
	{
		next unless $op->{type} eq 'ok' && defined $op->{token};
		my $T = $op->{token};
		my $val = $op->{value} // '';
		my $t = $tok{$T};
		if (($op->{f} eq 'release' || $op->{f} eq 'unlock') && $val eq 't')
		{
			$dead->($T, $op->{done}, $op, 'its release was acknowledged');
		}
		elsif (($op->{f} eq 'holds' || $op->{f} eq 'fholds') && $val eq 'f')
		{
			$dead->($T, $op->{done}, $op, 'lockq_holds said false');
		}
		elsif (($op->{f} eq 'renew' || $op->{f} eq 'release')
			&& $val eq 'f' && $t && ($op->{owner} // '') eq $t->{owner})
		{
			$dead->($T, $op->{done}, $op, "its owner's $op->{f} said false");
		}
	}
	my %tokens_of_lock;
	push @{ $tokens_of_lock{ $tok{$_}{lock} } }, $_ + 0 for keys %tok;
	for my $lock (keys %tokens_of_lock)
	{
		my @ts = sort { $b <=> $a } @{ $tokens_of_lock{$lock} };
		my ($min, $min_op);
		for my $T (@ts)
		{
			# every token of this lock above T was shown by $min
			$dead->($T, $min, $min_op, "a larger token ($min_op->{value}) of $lock was shown")
			  if defined $min;
			my $f = $tok{$T}{first};
			($min, $min_op) = ($f->{done}, $f) if !defined $min || $f->{done} < $min;
		}
	}
	# also tokens only ever probed (never shown as a grant) can die
	for my $op (@ops)
	{
		next unless $op->{type} eq 'ok' && defined $op->{token};
		my $T = $op->{token};
		my $d = $death{$T} or next;
		next unless $op->{inv} > $d->[0];
		my $val = $op->{value} // '';
		my $revived =
		  (($op->{f} eq 'holds' || $op->{f} eq 'fholds' || $op->{f} eq 'renew'
			  || $op->{f} eq 'release') && $val eq 't')
		  || ($GRANT_F{ $op->{f} } && $val eq $T);
		next unless $revived;
		$viol->('I1', sprintf('token %s on %s was dead at %s (%s), but %s = %s was invoked after that, at %s',
				$T, $op->{lock} // '?', ts($d->[0]), $d->[2], $op->{f}, $val, ts($op->{inv})),
			$d->[1], $op);
	}
	$stats{deaths} = scalar keys %death;
	# grants shown as new after their death are also covered above (T as a
	# grant after a larger token was shown)

	# Leases longer than asked.  outlived (counted, not a violation):
	# lockq_holds = t after the holder's own reckoning (a blocking
	# lockq_get's lease starts when it is granted, after its invoke).
	# LEASE (a violation): lockq_holds = t more than 5 ms after the latest
	# end any acknowledged call could have set (answer + ttl), when no call
	# with an unknown outcome could have extended it: the server counted
	# the lease longer than asked (a restart or crash carried it over its
	# downtime, say).
	for my $T (keys %tok)
	{
		my $t = $tok{$T};
		next if $t->{lib};
		my $ub;
		for my $op (@{ $by_owner{"$t->{owner}\0$t->{lock}"} // [] })
		{
			next if $op->{done} < $t->{c_lo};
			next unless $ACQ_F{ $op->{f} } || $op->{f} eq 'heartbeat' || $op->{f} eq 'renew';
			next if $op->{f} eq 'renew' && ($op->{token} // 0) != $T;
			if ($op->{type} ne 'ok')
			{
				$ub = 9**18;    # may have extended it at any time
				last;
			}
			next unless defined $op->{ttl};
			my $v = $op->{value} // '';
			next unless $v eq 't' || $v eq $T;
			my $end = $op->{done} + $op->{ttl} * 1_000_000;
			$ub = $end if !defined $ub || $end > $ub;
		}
		$t->{ub} = $ub;
	}
	for my $op (@ops)
	{
		next unless ($op->{f} eq 'holds' || $op->{f} eq 'fholds') && $op->{type} eq 'ok';
		next unless ($op->{value} // '') eq 't' && defined $op->{token};
		my $t = $tok{ $op->{token} } or next;
		$stats{holds_true}++;
		$stats{outlived}++ if defined $t->{reckon} && $op->{inv} > $t->{reckon};
		if (defined $t->{ub} && $op->{inv} > $t->{ub} + 5_000_000)
		{
			$stats{stretched}++;
			$viol->('LEASE',
				sprintf('lockq_holds(%s) on %s = t at %s, %.3f s after the latest end its calls could have set (%s)',
					$op->{token}, $t->{lock}, ts($op->{inv}), ($op->{inv} - $t->{ub}) / 1e9, ts($t->{ub})),
				$op);
		}
	}

	# --- I2: belief ends against the next grants ------------------------
	# A token T' of a lock must not be shown before e(T) of any smaller T,
	# counting only T's extensions sent before T' was shown (a renewal that
	# succeeds after that is I1's case).  Grants whose e cannot reach any
	# later showing leave the active list.
	for my $lock (sort keys %tokens_of_lock)
	{
		my @ts = sort { $a <=> $b } @{ $tokens_of_lock{$lock} };
		my @sm;
		my $m = 9**18;
		for (my $i = $#ts; $i >= 0; $i--)
		{
			my $d = $tok{ $ts[$i] }{first}{done};
			$m = $d if $d < $m;
			$sm[$i] = $m;
		}
		my @active;
		for my $i (0 .. $#ts)
		{
			my $t = $tok{ $ts[$i] };
			my $x = $t->{first}{done};
			@active = grep { $_->{e_inf} > $sm[$i] } @active;
			for my $p (@active)
			{
				next unless $p->{e_inf} > $x;
				my ($e, $why, $e_op) = e_at($p, $x);
				next unless defined $e && $x < $e;
				$viol->('I2', sprintf('token %s on %s was shown at %s while the holder of %s (%s) could still believe it valid until %s (%s)',
						$t->{token}, $lock, ts($x), $p->{token}, $p->{owner}, ts($e), $why),
					$p->{first}, $e_op, $t->{first});
				last;
			}
			my ($e) = e_at($t, 9**18);
			if (defined $e)
			{
				$t->{e_inf} = $e;
				push @active, $t;
			}
		}
	}

	# --- I2: fenced writes ------------------------------------------------
	my %writes;
	for my $op (@ops)
	{
		next unless $op->{f} eq 'fwrite' && $op->{type} eq 'ok';
		push @{ $writes{ $op->{lock} } }, $op;
		$stats{fwrites}++;
	}
	for my $lock (sort keys %writes)
	{
		my @w = sort { $a->{value} <=> $b->{value} } @{ $writes{$lock} };
		my ($max_op, $prev);
		for my $op (@w)
		{
			if ($prev && $prev->{value} == $op->{value})
			{
				$viol->('I2F', "two fenced writes on $lock committed as n = $op->{value}: a committed write was lost",
					$prev, $op);
			}
			if ($max_op && $op->{token} < $max_op->{token})
			{
				$viol->('I2F', "fenced write n = $op->{value} on $lock by token $op->{token} committed after n = $max_op->{value} by the larger token $max_op->{token}",
					$max_op, $op);
			}
			$max_op = $op if !$max_op || $op->{token} > $max_op->{token};
			$prev = $op;
		}
		if (defined $final->{$lock} && @w && $w[-1]{value} > $final->{$lock})
		{
			$viol->('I2F', "fenced write n = $w[-1]{value} on $lock committed, but the counter ended at $final->{$lock}: a committed write was lost",
				$w[-1]);
		}
	}

	# --- I3O: a grant answered before another was asked for is smaller ----
	sweep_order(
		[ map { [ $tok{$_}{c_lo}, $tok{$_}{c_hi}, $_ + 0, $tok{$_}{first} ] } keys %tok ],
		sub {
			my ($big, $small) = @_;
			$viol->('I3O', sprintf('token %s was answered at %s, before the grant of token %s was asked for (at %s)',
					$big->[2], ts($big->[1]), $small->[2], ts($small->[0])),
				$big->[3], $small->[3]);
		});

	# --- I3N: lockq_now() ---------------------------------------------------
	my @now = grep { $_->{f} eq 'now' && $_->{type} eq 'ok' } @ops;
	$stats{now} = scalar @now;
	sweep_order(
		[ map { [ $_->{inv}, $_->{done}, $_->{value}, $_ ] } @now ],
		sub {
			my ($big, $small) = @_;
			$viol->('I3N', sprintf('lockq_now() returned %s at %s, and later %s (asked for at %s)',
					$big->[2], ts($big->[1]), $small->[2], ts($small->[0])),
				$big->[3], $small->[3]);
		});

	# --- I4: FIFO for acknowledged client-side waiters -------------------
	my %clean;    # lock => [ [ack, token, enqueue op, grant op] ]
	for my $key (keys %by_owner)
	{
		my $list = $by_owner{$key};
		my $ack;
		for my $op (@$list)
		{
			if ($op->{f} eq 'enqueue')
			{
				$ack = ($op->{type} eq 'ok' && ($op->{value} // '') eq 'null') ? $op : undef;
				next;
			}
			next unless $ack;
			if ($op->{f} eq 'heartbeat' && ($op->{type} eq 'info'
					|| ($op->{type} eq 'ok' && ($op->{value} // '') eq 'null')))
			{
				next;
			}
			if ($op->{f} eq 'heartbeat' && $op->{type} eq 'ok' && $op->{value} =~ /^\d+$/)
			{
				push @{ $clean{ $op->{lock} } }, [ $ack->{done}, $op->{value}, $ack, $op ];
				$stats{waiters_clean}++;
			}
			$ack = undef;
		}
	}
	for my $lock (sort keys %clean)
	{
		my @A = sort { $a->[0] <=> $b->[0] } @{ $clean{$lock} };
		my @X = sort { $a->{c_lo} <=> $b->{c_lo} }
		  map { $tok{$_} } @{ $tokens_of_lock{$lock} // [] };
		my ($i, $maxA) = (0, undef);
		for my $x (@X)
		{
			while ($i < @A && $A[$i][0] < $x->{c_lo})
			{
				$maxA = $A[$i] if !$maxA || $A[$i][1] > $maxA->[1];
				$i++;
			}
			next unless $maxA && $x->{token} < $maxA->[1];
			$viol->('I4', sprintf('waiter %s on %s was queued at %s and granted %s, but token %s, asked for later (at %s), was granted before it',
					$maxA->[3]{owner}, $lock, ts($maxA->[0]), $maxA->[1], $x->{token}, ts($x->{c_lo})),
				$maxA->[2], $maxA->[3], $x->{first});
		}
	}

	# --- faults -------------------------------------------------------------
	for my $f (@$faults)
	{
		$stats{faults}++;
		$stats{ 'fault_' . $f->{kind} }++;
	}
	$stats{sessions} = scalar keys %sess;
	$stats{violations} = scalar @v;
	return (\@v, \%stats);
}

# e_at(t, x) is the end of grant t by its holder's belief, counting only
# the calls sent before x (x = 9**18: the furthest it ever reached): (time,
# why, the event that set it), or () when the holder could count on
# nothing.
sub e_at
{
	my ($t, $x) = @_;
	my ($e, $why, $op);
	if ($t->{lib})
	{
		($e, $why, $op) = @{ $t->{lib_e} } if $t->{lib_e};
	}
	else
	{
		my $step;
		if ($x >= 9**18)
		{
			# the furthest the belief ever reached
			for my $s (@{ $t->{ext} })
			{
				$step = $s if !$step || $s->[1] > $step->[1];
			}
		}
		else
		{
			for my $s (@{ $t->{ext} })
			{
				last if $s->[0] >= $x;
				$step = $s;
			}
		}
		($e, $why, $op) = ($step->[1], 'its lease by its own reckoning', $step->[2]) if $step;
	}
	return () unless defined $e;
	($e, $why, $op) = @{ $t->{cap} } if $t->{cap} && $t->{cap}[0] < $e;
	return ($e, $why, $op);
}

# sweep_order(items, report): items are [lo, hi, value, event]; whenever
# one item's hi is before another's lo, its value must be smaller.  Reports
# (bigger, smaller) for each item that has a larger predecessor.
sub sweep_order
{
	my ($items, $report) = @_;
	my @by_lo = sort { $a->[0] <=> $b->[0] } @$items;
	my @by_hi = sort { $a->[1] <=> $b->[1] } @$items;
	my ($j, $max) = (0, undef);
	for my $it (@by_lo)
	{
		while ($j < @by_hi && $by_hi[$j][1] < $it->[0])
		{
			$max = $by_hi[$j] if !$max || $by_hi[$j][2] > $max->[2];
			$j++;
		}
		$report->($max, $it) if $max && $max->[2] >= $it->[2];
	}
	return;
}

# ---------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------

my $T0 = 0;

# ts(ns) formats a time in seconds since the start of the run.
sub ts
{
	my ($t) = @_;
	return 'never' if !defined $t || $t >= 9**18;
	return sprintf('%.6f s', ($t - $T0) / 1e9);
}

sub fmt_op
{
	my ($op) = @_;
	my @a;
	push @a, $op->{lock} if defined $op->{lock};
	push @a, "owner=$op->{owner}" if defined $op->{owner};
	push @a, "ttl=$op->{ttl}ms" if defined $op->{ttl};
	push @a, "token=$op->{token}" if defined $op->{token};
	my $res = $op->{type} eq 'open' ? 'no answer' : "$op->{type} " . ($op->{value} // '-');
	$res .= " ($op->{note})" if defined $op->{note};
	return sprintf('%s/%s#%s %s(%s): sent %s, answered %s: %s  [%s]',
		$op->{proc}, $op->{inc}, $op->{id}, $op->{f}, join(' ', @a), ts($op->{inv}),
		ts($op->{done}), $res, $op->{src});
}

# report(violations, history, faults, max, context) prints the violations,
# each with its events, the faults near it and, with context, every call on
# the lock around it.
sub report
{
	my ($v, $h, $faults, $max, $context) = @_;
	my $n = 0;
	for my $x (@$v)
	{
		last if ++$n > $max;
		print "VIOLATION $x->{code} ($NAME{$x->{code}}): $x->{msg}\n";
		my ($lo, $hi);
		for my $op (@{ $x->{events} })
		{
			print "    ", fmt_op($op), "\n";
			$lo = $op->{inv} if !defined $lo || $op->{inv} < $lo;
			$hi = $op->{done} if $op->{done} < 9**18 && (!defined $hi || $op->{done} > $hi);
		}
		next unless defined $lo;
		$hi //= $lo;
		for my $f (@$faults)
		{
			next if $f->{t1} < $lo - 10e9 || $f->{t0} > $hi + 1e9;
			printf "    fault: %s %s from %s to %s\n", $f->{kind}, $f->{detail}, ts($f->{t0}), ts($f->{t1});
		}
		if ($context)
		{
			my %locks = map { $_->{lock} => 1 } grep { defined $_->{lock} } @{ $x->{events} };
			print "    calls on ", join(',', sort keys %locks), " around it:\n";
			for my $op (sort { $a->{inv} <=> $b->{inv} } @{ $h->{ops} })
			{
				next unless defined $op->{lock} && $locks{ $op->{lock} };
				next if $op->{done} < $lo - $context * 1e9 || $op->{inv} > $hi + $context * 1e9;
				print "      ", fmt_op($op), "\n";
			}
		}
	}
	print "... and ", scalar(@$v) - $max, " more violations\n" if @$v > $max;
	return;
}

sub run_files
{
	my ($nemesis, $max, $context, @files) = @_;
	my $h = read_histories(@files);
	my ($faults, $final) = read_nemesis($nemesis);
	my @times = map { $_->{inv} } @{ $h->{ops} };
	push @times, map { $_->{t} } @{ $h->{metas} };
	$T0 = (sort { $a <=> $b } @times)[0] // 0;
	my ($v, $stats) = check($h, $faults, $final);
	report($v, $h, $faults, $max, $context);
	print "$_\n" for @{ $h->{notes} // [] };
	my %codes;
	$codes{ $_->{code} }++ for @$v;
	print "SUMMARY ", (%codes ? join(' ', map { "$_=$codes{$_}" } sort keys %codes) : 'no violations'), "\n";
	print "STATS ", join(' ', map { "$_=$stats->{$_}" } sort keys %$stats), "\n";
	return @$v ? 1 : 0;
}

# selftest(dir): each DIR/*.tsv must yield exactly its expected codes.
sub selftest
{
	my ($dir) = @_;
	my @cases = sort glob("$dir/*.tsv");
	die "no cases in $dir\n" unless @cases;
	my $bad = 0;
	for my $case (@cases)
	{
		my $name = basename($case, '.tsv');
		my $h = eval { read_histories($case) };
		if (!$h)
		{
			print "not ok - $name: $@";
			$bad++;
			next;
		}
		my $nem = $case;
		$nem =~ s/\.tsv$/.nemesis/;
		my ($faults, $final) = read_nemesis(-e $nem ? $nem : undef);
		my ($v) = check($h, $faults, $final);
		my %got = map { $_->{code} => 1 } @$v;
		my %want = map { $_ => 1 } @{ $h->{expect} };
		my $got = join(',', sort keys %got) || 'none';
		my $want = join(',', sort keys %want) || 'none';
		if ($got eq $want)
		{
			print "ok - $name: $want\n";
		}
		else
		{
			print "not ok - $name: expected $want, got $got\n";
			$T0 = 0;
			report($v, $h, $faults, 10, 0);
			$bad++;
		}
	}
	return $bad ? 1 : 0;
}

my ($nemesis, $selftest, $context);
my $max = 30;
GetOptions(
	'nemesis=s' => \$nemesis,
	'selftest=s' => \$selftest,
	'max-report=i' => \$max,
	'context=f' => \$context)
  or die "usage: $0 [--nemesis FILE] [--max-report N] [--context SECONDS] HISTORY... | --selftest DIR\n";

my $rc = eval {
	return selftest($selftest) if defined $selftest;
	die "usage: $0 [--nemesis FILE] [--max-report N] [--context SECONDS] HISTORY... | --selftest DIR\n"
	  unless @ARGV;
	return run_files($nemesis, $max, $context, @ARGV);
};
if (!defined $rc)
{
	print STDERR $@;
	exit 2;
}
exit $rc;
