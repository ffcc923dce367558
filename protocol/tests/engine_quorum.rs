//! The primary partition at one Engine, one input at a time
//! (`FFD_QUORUM=majority`, `engine/quorum.rs`, `docs/design.md` §4.11 "Primary partition"):
//! an accuser declares only with a majority of votes (an exact half with
//! the lowest live rank), excludes itself without one; a voter forwards a
//! round once, votes to its flood parent and follows the outcome; the
//! suspect refutes; proof is declared at once.

mod support;

use std::time::Duration;

use ffd_protocol::wire::{Encoder, Message, OutcomeVerdict, VOTE_COMPLETE};
use ffd_protocol::{
    Cause, Confirmation, Engine, EngineConfig, Event, Evidence, Exclusion, FabricSaid,
    FailureDetail, Input, Kind, Output, Participation, QuorumMode, Rank, SlotReading, Time,
    TransportErrorKind, slot_value,
};
use support::{Job, at, drain, drained, events, ms, serve_deadlines, slot_reading, sorted, tick};

const KEY: u64 = 0x0000_0011_0000_0011;
const JOB: Job = Job::new(KEY, [0x11; 32]);

/// Period 10 ms, timeout 100 ms (checks every 25 ms), no start-up grace,
/// a majority needed for silence.
fn config() -> EngineConfig {
    EngineConfig {
        startup_grace: Some(Duration::ZERO),
        ..support::config(QuorumMode::Majority)
    }
}

/// Rank `me` of a rank-ordered ring of `n` (its emitter is `me − 1`),
/// checking its slot only.
fn checker(n: u32, me: Rank) -> Engine {
    drained(JOB.checker(config(), n, me))
}

/// The receivers of the sends of `kind`, sorted: a flood's fan-out order
/// is no part of what these tests check.
fn kinds_to(outs: &[Output], n: u32, kind: Kind) -> Vec<Rank> {
    sorted(JOB.sent_to(outs, n, kind))
}

/// The verdicts of the accusation outcomes sent in `outs`.
fn outcome_verdicts(outs: &[Output], n: u32) -> Vec<OutcomeVerdict> {
    JOB.sent(outs, n)
        .into_iter()
        .filter_map(|(_, _, m)| match m {
            Message::Outcome { verdict, .. } => Some(verdict),
            _ => None,
        })
        .collect()
}

/// Runs `e`'s deadlines up to `until`, its slot never written: everything
/// it output.
fn run_until(e: &mut Engine, until: Time) -> Vec<Output> {
    support::run_until(e, until, slot_reading(|_| 0))
}

/// The nonce of the accusation round `outs` flooded.
fn round(outs: &[Output], n: u32) -> u32 {
    JOB.sent(outs, n)
        .into_iter()
        .find_map(|(_, _, m)| match m {
            Message::Suspect { nonce, .. } => Some(nonce),
            _ => None,
        })
        .expect("a Suspect flood")
}

#[test]
fn silence_is_an_accusation_declared_once_a_majority_votes() {
    let n = 5;
    let mut e = checker(n, 2);
    // Its emitter 1 stands still for the timeout: an accusation, not a
    // declaration: the flood and a direct probe of the suspect.
    let outs = run_until(&mut e, at(110));
    assert!(events(&outs).is_empty(), "{:?}", events(&outs));
    assert_eq!(kinds_to(&outs, n, Kind::Suspect), vec![0, 1, 3, 4]);
    assert_eq!(kinds_to(&outs, n, Kind::Probe), vec![1]);
    assert_eq!(e.stats().quorum.accusations, 1);
    let nonce = round(&outs, n);
    // Rank 0's subtree of 2 (itself and 4) votes: 3 of 5 live ranks.
    let outs = JOB.deliver(
        &mut e,
        at(112),
        Encoder::new(KEY, 0).vote(2, nonce, 2, VOTE_COMPLETE),
    );
    assert_eq!(
        events(&outs),
        vec![Event::Failed {
            rank: 1,
            detector: 2,
            cause: Cause::Timeout,
            hops: 0,
            detail: FailureDetail::Silence {
                said: FabricSaid::Nothing,
                quorum: Some(Confirmation {
                    votes: 3,
                    live: 5,
                    tiebreak: false
                }),
            },
        }]
    );
    assert_eq!(e.stats().quorum.quorum_confirmations, 1);
    assert!(!kinds_to(&outs, n, Kind::Notice).is_empty());
}

#[test]
fn an_exact_half_goes_on_only_with_the_lowest_live_rank() {
    let n = 4;
    // Rank 0 (the lowest) accuses 3; rank 1 votes: 2 of 4 with the
    // tie-break.
    let mut low = checker(n, 0);
    let outs = run_until(&mut low, at(110));
    let nonce = round(&outs, n);
    let outs = JOB.deliver(&mut low, at(112), Encoder::new(KEY, 1).vote(0, nonce, 1, 0));
    assert!(
        matches!(
            events(&outs)[..],
            [Event::Failed {
                rank: 3,
                detail: FailureDetail::Silence {
                    quorum: Some(Confirmation {
                        votes: 2,
                        live: 4,
                        tiebreak: true
                    }),
                    ..
                },
                ..
            }]
        ),
        "{outs:?}"
    );
    // Rank 2 accuses 1; rank 3 votes: 2 of 4 without rank 0. No quorum:
    // new rounds, then it excludes itself one give-up window after the
    // accusation began, and tells its voters.
    let mut high = checker(n, 2);
    let outs = run_until(&mut high, at(110));
    let first = round(&outs, n);
    let outs = JOB.deliver(
        &mut high,
        at(112),
        Encoder::new(KEY, 3).vote(2, first, 1, 0),
    );
    assert!(events(&outs).is_empty(), "{outs:?}");
    let mut outs = Vec::new();
    let mut excluded_at = None;
    while let Some(d) = high.next_deadline() {
        assert!(d <= at(400), "still not excluded at {d}");
        high.handle_timeout(d, &SlotReading(0));
        outs.extend(drain(&mut high));
        if high.participation() == Participation::Excluded {
            excluded_at = Some(d);
            break;
        }
    }
    // Within 2 x timeout of the silence's start (its emitter never wrote).
    let excluded_at = excluded_at.expect("excluded");
    assert!(excluded_at <= at(200), "excluded at {excluded_at}");
    assert!(high.stats().quorum.accusation_rounds >= 1);
    assert_eq!(
        events(&outs),
        vec![Event::SelfExcluded {
            by: 2,
            why: Exclusion::NoQuorum
        }]
    );
    let outcomes = outcome_verdicts(&outs, n);
    assert!(
        !outcomes.is_empty() && outcomes.iter().all(|v| *v == OutcomeVerdict::NoQuorum),
        "{outcomes:?}"
    );
    assert_eq!(high.stats().quorum.no_quorum_exclusions, 1);
}

#[test]
fn a_voter_forwards_a_round_once_votes_to_its_parent_and_follows_the_outcome() {
    let n = 8;
    let mut v = checker(n, 2);
    let suspect = Encoder::new(KEY, 1).suspect(1, 7, 5, 0, 0);
    let outs = JOB.deliver(&mut v, at(1), suspect.clone());
    let forwarded = kinds_to(&outs, n, Kind::Suspect);
    assert!(
        !forwarded.is_empty() && !forwarded.contains(&1),
        "{forwarded:?}"
    );
    // Its neighbours have not answered: it votes after the vote wait
    // (timeout / 32), to its flood parent.
    let outs = run_until(&mut v, at(1) + ms(100) / 32);
    let votes: Vec<(Rank, Message)> = JOB
        .sent(&outs, n)
        .into_iter()
        .filter(|(_, header, _)| header.kind == Kind::Vote)
        .map(|(to, _, m)| (to, m))
        .collect();
    assert!(
        matches!(
            votes[..],
            [(
                1,
                Message::Vote {
                    accuser: 1,
                    nonce: 7,
                    count: 1,
                    ..
                }
            )]
        ),
        "{votes:?}"
    );
    // Withdrawn: passed on once; a straggling copy of the round is not
    // forwarded again (it would circulate for ever).
    let withdrawn = Encoder::new(KEY, 1).outcome(1, 7, 5, 0, OutcomeVerdict::Withdrawn);
    let outs = JOB.deliver(&mut v, at(5), withdrawn.clone());
    assert!(!kinds_to(&outs, n, Kind::Outcome).is_empty());
    assert!(events(&outs).is_empty());
    let late = Encoder::new(KEY, 3).suspect(1, 7, 5, 1, 0);
    assert!(kinds_to(&JOB.deliver(&mut v, at(6), late), n, Kind::Suspect).is_empty());
    assert!(kinds_to(&JOB.deliver(&mut v, at(7), withdrawn), n, Kind::Outcome).is_empty());
    // A new accusation's round with no quorum: the ballot holder excludes
    // itself with the accuser.
    JOB.deliver(&mut v, at(10), Encoder::new(KEY, 1).suspect(1, 9, 5, 0, 0));
    let outs = JOB.deliver(
        &mut v,
        at(80),
        Encoder::new(KEY, 1).outcome(1, 9, 5, 0, OutcomeVerdict::NoQuorum),
    );
    assert_eq!(
        events(&outs),
        vec![Event::SelfExcluded {
            by: 1,
            why: Exclusion::NoQuorum
        }]
    );
}

/// A voter counts only the votes of ranks it forwarded the round to, and
/// never sends a count above N: a count above N does not decode at its
/// flood parent, and the whole subtree's votes would be lost (the fuzz's
/// `send_undecodable` on seeds 1, 3, 5 and 6 before the fix).
#[test]
fn a_voter_counts_only_the_ranks_it_forwarded_to_and_never_above_n() {
    let n = 8;
    let mut v = checker(n, 2);
    let outs = JOB.deliver(&mut v, at(1), Encoder::new(KEY, 1).suspect(1, 7, 5, 0, 0));
    let forwarded = kinds_to(&outs, n, Kind::Suspect);
    assert!(forwarded.len() >= 2, "{forwarded:?}");
    // A vote from a rank the round did not go to (its parent, 1) is no
    // child's: refused and counted, and no vote goes up for it.
    let refused = v.stats().drops.dropped_untrusted_origin;
    let outs = JOB.deliver(
        &mut v,
        at(2),
        Encoder::new(KEY, 1).vote(1, 7, n - 1, VOTE_COMPLETE),
    );
    assert_eq!(v.stats().drops.dropped_untrusted_origin, refused + 1);
    assert!(kinds_to(&outs, n, Kind::Vote).is_empty(), "{outs:?}");
    // Two children each claim N − 1 (faulty or forged): 1 + 2(N − 1) is
    // more than the job holds; what goes up is capped at N and decodes.
    let mut counts = Vec::new();
    for (i, &child) in forwarded.iter().enumerate() {
        let outs = JOB.deliver(
            &mut v,
            at(3 + i as u64),
            Encoder::new(KEY, child).vote(1, 7, n - 1, VOTE_COMPLETE),
        );
        counts.extend(
            JOB.sent(&outs, n)
                .into_iter()
                .filter_map(|(to, _, m)| match m {
                    Message::Vote { count, .. } => {
                        assert_eq!(to, 1, "votes go to the flood parent");
                        Some(count)
                    }
                    _ => None,
                }),
        );
    }
    assert_eq!(counts.iter().max(), Some(&n), "{counts:?}");
}

#[test]
fn the_suspect_refutes_and_the_accuser_withdraws() {
    let n = 5;
    // The suspect answers a flood naming it, and neither forwards nor votes.
    let mut s = checker(n, 1);
    let outs = JOB.deliver(&mut s, at(1), Encoder::new(KEY, 3).suspect(2, 4, 1, 1, 0));
    assert_eq!(kinds_to(&outs, n, Kind::Refute), vec![2]);
    assert!(kinds_to(&outs, n, Kind::Suspect).is_empty());
    assert!(kinds_to(&run_until(&mut s, at(20)), n, Kind::Vote).is_empty());
    // The accuser takes the refutation: nothing is declared, the voters
    // drop their ballots, its emitter gets a fresh timeout.
    let mut a = checker(n, 2);
    let outs = run_until(&mut a, at(110));
    let nonce = round(&outs, n);
    let outs = JOB.deliver(&mut a, at(111), Encoder::new(KEY, 1).refute(2, nonce));
    assert!(events(&outs).is_empty());
    assert!(!kinds_to(&outs, n, Kind::Outcome).is_empty());
    assert_eq!(a.stats().quorum.refutations, 1);
    assert!(events(&run_until(&mut a, at(200))).is_empty());
}

#[test]
fn proof_is_declared_at_once_and_silence_is_accused() {
    let n = 5;
    let error = |evidence| Input::TransportError {
        peer: 1,
        kind: TransportErrorKind::HeartbeatWrite,
        evidence,
        said: FabricSaid::Nothing,
    };
    let mut e = checker(n, 2);
    e.handle(at(5), error(Evidence::Silence)).unwrap();
    let outs = drain(&mut e);
    assert!(events(&outs).is_empty());
    assert_eq!(kinds_to(&outs, n, Kind::Probe), vec![1]);
    assert!(!kinds_to(&outs, n, Kind::Suspect).is_empty());
    e.handle(at(6), error(Evidence::Proof)).unwrap();
    assert_eq!(
        events(&drain(&mut e)),
        vec![Event::Failed {
            rank: 1,
            detector: 2,
            cause: Cause::InBand,
            hops: 0,
            detail: FailureDetail::Proof {
                said: FabricSaid::Nothing
            },
        }]
    );
}

/// An overloaded machine: the votes come, but slowly (one every 20 ms,
/// the last 80 ms after the first: past the 25 ms of a round and the 75 ms
/// after which an accusation gives up). While the count grows the
/// accusation is neither restarted from zero (a new round counts from one
/// again) nor given up: it reaches its quorum, and the accuser does not
/// exclude itself (nor, through its outcome, every rank that voted).
#[test]
fn votes_still_coming_in_hold_off_new_rounds_and_the_give_up() {
    let n = 11;
    let mut e = checker(n, 2);
    let outs = run_until(&mut e, at(110));
    assert!(events(&outs).is_empty(), "{:?}", events(&outs));
    let nonce = round(&outs, n);
    let mut declared = None;
    // Overlay neighbours of rank 2, each a subtree of one.
    for (i, voter) in [0u32, 3, 4, 6, 9].into_iter().enumerate() {
        let t = at(112 + 20 * i as u64);
        let outs = run_until(&mut e, t);
        assert!(
            events(&outs).is_empty(),
            "before the vote at {t}: {:?}",
            events(&outs)
        );
        assert!(
            JOB.sent(&outs, n)
                .iter()
                .all(|(_, _, m)| !matches!(m, Message::Suspect { .. })),
            "a new round while votes were still coming in (before {t})"
        );
        let outs = JOB.deliver(&mut e, t, Encoder::new(KEY, voter).vote(2, nonce, 1, 0));
        if let Some(Event::Failed { rank, detail, .. }) = events(&outs).first() {
            declared = Some((t, *rank, *detail));
        }
    }
    let (t, rank, detail) = declared.expect("the sixth vote makes a majority of 11");
    assert_eq!((t, rank), (at(192), 1));
    assert!(
        matches!(
            detail,
            FailureDetail::Silence {
                quorum: Some(Confirmation {
                    votes: 6,
                    live: 11,
                    ..
                }),
                ..
            }
        ),
        "{detail:?}"
    );
    assert_eq!(e.participation(), Participation::Active);
    assert_eq!(e.stats().quorum.no_quorum_exclusions, 0);
}

/// Wake-ups 60 ms late (late after 25 ms, the lag guard at 50 ms): each
/// raises the own health multiplier by one. The time of the last.
fn run_late(e: &mut Engine, wakeups: u32) -> Time {
    let mut last_late = Time::ZERO;
    for _ in 0..wakeups {
        let d = e.next_deadline().expect("a deadline");
        last_late = d + ms(60);
        tick(e, last_late, 0);
    }
    last_late
}

/// An accuser whose own wake-ups run late (own health above 1) does not
/// give up its side for want of votes: the votes it lacks may be its own
/// lateness or its voters', and its give-up takes its voters along
/// (at N = 128 on 2 cores with a 20 ms timeout, ranks whose
/// wake-ups ran hundreds of ms late excluded themselves one after the
/// other; at N = 64 with CPU hogs, one give-up excluded 24 live ranks).
/// Its late wake-ups already defer the give-up; the on-time wake-ups
/// between them must too, until the health is back at 1 (a stretched
/// timeout of on-time running per step). Then a minority side still gives
/// up.
#[test]
fn an_accuser_whose_wakeups_ran_late_defers_its_give_up_until_its_health_is_back_at_one() {
    let n = 4;
    // One late wake-up (health 2: back at 1 after 200 ms on time), and
    // three (the ceiling, 4: 400 + 300 + 200 ms).
    for (late_wakeups, health, back_after) in [(1, 2, 200), (3, 4, 900)] {
        let mut e = checker(n, 2);
        let outs = run_until(&mut e, at(110));
        round(&outs, n);
        let last_late = run_late(&mut e, late_wakeups);
        assert_eq!(e.own_health(), health);
        // From here every wake-up is on time. Without the rule the accuser
        // excludes itself at the first on-time wake-up past its give-up
        // window (about 200 ms, as in the test above).
        let mut excluded_at = None;
        while let Some(d) = e.next_deadline() {
            assert!(d <= last_late + ms(3000), "still not excluded at {d}");
            tick(&mut e, d, 0);
            if e.participation() == Participation::Excluded {
                excluded_at = Some(d);
                break;
            }
        }
        let excluded_at = excluded_at.expect("a minority side still gives up");
        assert!(
            excluded_at >= last_late + ms(back_after),
            "health {health}: gave up at {excluded_at} (last late wake-up {last_late})"
        );
        assert!(
            excluded_at <= last_late + ms(back_after) + ms(100),
            "health {health}: gave up only at {excluded_at} (last late wake-up {last_late})"
        );
        assert_eq!(e.own_health(), 1);
        assert_eq!(e.stats().quorum.no_quorum_exclusions, 1);
    }
}

/// Rank 5 of 10: its emitter 4 reported failed (after `late_wakeups` late
/// wake-ups), it mends to 3, whose link is confirmed at once, while rank
/// 8's accusation of 7 is under way here ("silence around"). The time of
/// the link-up.
fn mended_amid_accusations(late_wakeups: u32) -> (Engine, Time) {
    let n = 10;
    let mut e = checker(n, 5);
    let t = run_late(&mut e, late_wakeups).max(at(1));
    JOB.deliver(&mut e, t, Encoder::new(KEY, 8).notice(8, 0, &[4], &[]));
    assert_eq!(e.emitter(), Some(3));
    JOB.deliver(&mut e, t, Encoder::new(KEY, 8).suspect(8, 1, 7, 0, 0));
    e.handle(t, Input::Sent { to: 3 }).expect("accepted");
    drain(&mut e);
    assert_eq!(e.stats().observation.mend_links_confirmed, 1);
    (e, t)
}

/// When rank 5 of [`mended_amid_accusations`] floods its accusation of
/// its new emitter 3 (whose slot stays empty), running on time.
fn accuses_new_emitter_at(e: &mut Engine, limit: Time) -> Option<Time> {
    serve_deadlines(
        e,
        limit,
        Duration::ZERO,
        slot_reading(|_| 0),
        |_, d, outs| {
            let accused = JOB.sent(&outs, 10).into_iter().any(|(_, _, m)| {
                matches!(
                    m,
                    Message::Suspect {
                        accuser: 5,
                        suspect: 3,
                        ..
                    }
                )
            });
            accused.then_some(d)
        },
    )
}

/// The chain rule (`docs/design.md` §4.11 "Primary partition", "Chains"): while other
/// accusations are under way, a freshly mended emitter whose link is up
/// has `first_beat_within` (timeout / 8) to write its first beat, so a
/// partition's chain of cut-off ranks costs an eighth of a timeout per
/// link. Only while the observer keeps time: at N = 32 with CPU hogs on 2
/// cores and a 10 ms timeout, live emitters missed the eighth
/// one after another and a majority confirmed each, 19 false declarations
/// along one mending chain. An observer whose wake-ups ran late gives the
/// new emitter the full stretched timeout from its link-up (the mend rate
/// limit).
#[test]
fn a_late_observer_gives_a_mended_emitter_a_full_timeout_even_amid_accusations() {
    let (mut e, linked) = mended_amid_accusations(0);
    assert_eq!(e.own_health(), 1);
    let t = accuses_new_emitter_at(&mut e, linked + ms(1000)).expect("accused");
    assert!(
        t >= linked + ms(12) && t <= linked + ms(13),
        "at health 1 the eighth holds: linked at {linked}, accused at {t}"
    );

    let (mut e, linked) = mended_amid_accusations(1);
    assert_eq!(e.own_health(), 2);
    let t = accuses_new_emitter_at(&mut e, linked + ms(1000)).expect("accused");
    assert!(
        t >= linked + ms(200),
        "at health 2: linked at {linked}, accused at {t}, before the stretched timeout"
    );
    assert!(
        t <= linked + ms(200) + ms(25),
        "linked at {linked}, accused at {t}"
    );
}

/// The Failed events among `outs` and when: (rank, detector).
fn failed(outs: &[Output]) -> Vec<(Rank, Rank)> {
    events(outs)
        .into_iter()
        .filter_map(|e| match e {
            Event::Failed { rank, detector, .. } => Some((rank, detector)),
            _ => None,
        })
        .collect()
}

/// Votes read on a wake-up that came later than the lag guard (the driver
/// reads its queue before it runs the timers) confirm nothing: this
/// rank's own stall is no evidence against its emitter. The tick that
/// follows trips the lag guard, which withdraws the accusation of the
/// emitter (the voters drop their ballots) and gives the emitter a fresh
/// timeout. At N = 128 on 2 cores with one rank per emulated host an
/// accuser whose thread had slept 157 ms confirmed its accusation of a
/// live emitter on the votes of that very wake-up.
#[test]
fn votes_read_on_a_late_wakeup_confirm_nothing_and_the_lag_guard_withdraws_the_accusation() {
    let n = 5;
    let mut e = checker(n, 2);
    let outs = run_until(&mut e, at(110));
    let nonce = round(&outs, n);
    // The accuser's thread sleeps: its next timer is due at 125 ms, it
    // runs at 185 ms (60 ms late, the lag guard is 50 ms) and reads a
    // majority's votes first.
    let due = e.next_deadline().expect("a deadline");
    let woke = due + ms(60);
    let outs = JOB.deliver(
        &mut e,
        woke,
        Encoder::new(KEY, 0).vote(2, nonce, 2, VOTE_COMPLETE),
    );
    assert_eq!(failed(&outs), vec![], "confirmed on a late wake-up");
    assert_eq!(e.stats().quorum.quorum_confirmations, 0);
    // Then its timers: the lag guard withdraws the accusation.
    let outs = tick(&mut e, woke, 0);
    assert_eq!(failed(&outs), vec![]);
    assert_eq!(e.stats().health.self_lag_trips, 1);
    assert_eq!(e.stats().quorum.withdrawn_on_self_lag, 1);
    let outcomes = outcome_verdicts(&outs, n);
    assert!(
        !outcomes.is_empty() && outcomes.iter().all(|v| *v == OutcomeVerdict::Withdrawn),
        "{outcomes:?}"
    );
    // The emitter has a fresh (stretched: health 2) timeout from the
    // late wake-up: a new accusation, not a declaration, once it is up.
    let outs = run_until(&mut e, woke + ms(190));
    assert_eq!(failed(&outs), vec![]);
    assert_eq!(e.stats().quorum.accusations, 1);
    let outs = run_until(&mut e, woke + ms(230));
    assert_eq!(failed(&outs), vec![]);
    assert_eq!(
        e.stats().quorum.accusations,
        2,
        "accused again once its time is up"
    );
}

/// Rank 2 of 5 accuses its silent emitter (1) at 110 ms, its next wake-up
/// comes `late`, and a millisecond on a majority's votes arrive (in the
/// round that wake-up flooded, if it flooded one): the Engine, the
/// round's nonce and what the votes produced.
fn voted_after_a_late_wakeup(late: Duration) -> (Engine, u32, Vec<Output>) {
    let n = 5;
    let mut e = checker(n, 2);
    let outs = run_until(&mut e, at(110));
    let mut nonce = round(&outs, n);
    let due = e.next_deadline().expect("a deadline");
    let outs = tick(&mut e, due + late, 0);
    if !kinds_to(&outs, n, Kind::Suspect).is_empty() {
        nonce = round(&outs, n);
    }
    let outs = JOB.deliver(
        &mut e,
        due + late + ms(1),
        Encoder::new(KEY, 0).vote(2, nonce, 2, VOTE_COMPLETE),
    );
    (e, nonce, outs)
}

/// A wake-up later than one period, though under `late_wakeup` (health
/// stays 1), strains the accuser too: at least one of its own beats left
/// late, so its host is short of CPU and the suspect may be starved by
/// the same shortage. A majority confirmation after it is held to the
/// ceiling, and the suspect's answer meanwhile withdraws it. At N = 128
/// on 2 cores, one rank per emulated host: two accusers at health 1,
/// 14 and 24 ms late during the vote, declared live ranks whose threads
/// had not run for 250-280 ms; they answered the accusers' probes
/// within milliseconds of the declaration.
#[test]
fn an_accuser_a_period_late_holds_a_confirmed_accusation() {
    // Under a period late: on time, declared at once.
    let (_, _, outs) = voted_after_a_late_wakeup(ms(9));
    assert_eq!(failed(&outs), vec![(1, 2)], "held on time");
    // 15 ms late: over the 10 ms period, under the 25 ms late_wakeup, so
    // health stays 1.
    let (mut e, nonce, outs) = voted_after_a_late_wakeup(ms(15));
    assert_eq!(e.own_health(), 1);
    assert_eq!(failed(&outs), vec![], "declared a period late at once");
    assert_eq!(e.stats().quorum.confirmations_held, 1);
    let outs = run_until(&mut e, at(250));
    assert_eq!(failed(&outs), vec![]);
    let outs = JOB.deliver(&mut e, at(250), Encoder::new(KEY, 1).refute(2, nonce));
    assert_eq!(failed(&outs), vec![]);
    assert_eq!(e.stats().quorum.refutations, 1);
    let outs = run_until(&mut e, at(450));
    assert_eq!(failed(&outs), vec![], "declared after it answered");
}

/// Votes read on a wake-up a period late, before the tick that notes its
/// lateness (the driver reads its queue first), find the accuser strained
/// all the same: held, not declared.
#[test]
fn votes_read_on_a_wakeup_a_period_late_are_held() {
    let n = 5;
    let mut e = checker(n, 2);
    let outs = run_until(&mut e, at(110));
    let nonce = round(&outs, n);
    let due = e.next_deadline().expect("a deadline");
    let outs = JOB.deliver(
        &mut e,
        due + ms(15),
        Encoder::new(KEY, 0).vote(2, nonce, 2, VOTE_COMPLETE),
    );
    assert_eq!(failed(&outs), vec![], "declared on a wake-up a period late");
    assert_eq!(e.stats().quorum.confirmations_held, 1);
    assert_eq!(e.own_health(), 1);
}

/// Lifeguard's suspicion timeout, shaped by own health: an accusation
/// that a majority confirms while this rank's own timing is strained (a
/// wake-up later than `strain_lateness`, a period here, since the accusation
/// began, or own health above 1) is held until the suspect has been silent for
/// `health_max` timeouts (400 ms here, the bound of design §4.3 "Timeout"), so that
/// a suspect starved by the same overload can still answer; an answer
/// meanwhile withdraws it. On time (health 1, no late wake-up) it is
/// declared at once (`silence_is_an_accusation_declared_once_a_majority_votes`).
/// At N = 128 on 2 cores, one rank per emulated host: an accuser whose
/// health rose to 4 during the vote declared a live rank whose thread had
/// not run for 270 ms; it answered 2 ms after the notice.
#[test]
fn an_accuser_under_strain_holds_a_confirmed_accusation_until_the_ceiling() {
    for answer in [false, true] {
        // 30 ms late (late after 25 ms; under the 50 ms lag guard):
        // health 2.
        let (mut e, nonce, outs) = voted_after_a_late_wakeup(ms(30));
        assert_eq!(e.own_health(), 2);
        assert_eq!(e.stats().health.self_lag_trips, 0);
        assert_eq!(failed(&outs), vec![], "declared under strain at once");
        assert_eq!(e.stats().quorum.confirmations_held, 1);
        // Its emitter (1) has not written since 0 ms: held until 400 ms.
        let outs = run_until(&mut e, at(300));
        assert_eq!(failed(&outs), vec![]);
        if answer {
            let outs = JOB.deliver(&mut e, at(300), Encoder::new(KEY, 1).refute(2, nonce));
            assert_eq!(failed(&outs), vec![]);
            assert_eq!(e.stats().quorum.refutations, 1);
            let outs = run_until(&mut e, at(450));
            assert_eq!(failed(&outs), vec![], "declared after it answered");
            continue;
        }
        let mut declared_at = None;
        while let Some(d) = e.next_deadline() {
            assert!(d <= at(500), "still not declared at {d}");
            let outs = tick(&mut e, d, 0);
            if !failed(&outs).is_empty() {
                assert_eq!(failed(&outs), vec![(1, 2)]);
                declared_at = Some(d);
                break;
            }
        }
        let declared_at = declared_at.expect("declared");
        assert!(
            declared_at >= at(400) && declared_at <= at(425),
            "declared at {declared_at}"
        );
        assert_eq!(e.stats().quorum.quorum_confirmations, 1);
    }
}

/// A ballot that expires with no `Outcome` seen is kept spent
/// (`docs/design.md` §4.11, "Spent ballots"): a straggling copy of its
/// round is refused, neither forwarded nor voted on (joined again, it had
/// a second flood parent, which counted this rank a second time); a newer
/// round is joined; and at the limit of 256 ballots a new accusation takes
/// a spent ballot's place, where open ones refuse it.
#[test]
fn a_spent_ballot_refuses_its_round_and_makes_room_for_a_new_one() {
    let n = 64;
    let mut v = checker(n, 2);
    let mut beat = 0u16;
    let mut beating = slot_reading(move |_| {
        beat = beat.wrapping_add(1);
        slot_value(0, 0, beat)
    });
    let sent = |outs: &[Output]| {
        let kinds: Vec<Kind> = JOB
            .sent(outs, n)
            .into_iter()
            .map(|(_, h, _)| h.kind)
            .collect();
        (kinds.contains(&Kind::Suspect), kinds.contains(&Kind::Vote))
    };
    let outs = JOB.deliver(&mut v, at(1), Encoder::new(KEY, 1).suspect(1, 7, 5, 0, 0));
    assert!(sent(&outs).0, "the round is forwarded");
    // 1.5 timeouts on, the ballot expires (spent); the emitter beats.
    support::run_until(&mut v, at(200), &mut beating);
    let outs = JOB.deliver(&mut v, at(201), Encoder::new(KEY, 3).suspect(1, 7, 5, 1, 0));
    let mut later = support::run_until(&mut v, at(260), &mut beating);
    later.extend(outs);
    assert_eq!(sent(&later), (false, false), "{later:?}");
    // A newer round of the same accusation is joined.
    let outs = JOB.deliver(&mut v, at(261), Encoder::new(KEY, 1).suspect(1, 9, 5, 0, 0));
    assert!(sent(&outs).0);
    // 256 ballots at once: the 257th is refused while they are open.
    let pairs: Vec<(Rank, Rank)> = (10..40)
        .flat_map(|a| (50..59).map(move |s| (a, s)))
        .collect();
    let mut t = at(262);
    for &(a, s) in &pairs[..255] {
        JOB.deliver(&mut v, t, Encoder::new(KEY, a).suspect(a, 1, s, 0, 0));
        t += Duration::from_micros(10);
    }
    assert_eq!(v.stats().quorum.ballots_refused, 0);
    let (a, s) = pairs[255];
    let outs = JOB.deliver(&mut v, t, Encoder::new(KEY, a).suspect(a, 1, s, 0, 0));
    assert!(!sent(&outs).0);
    assert_eq!(v.stats().quorum.ballots_refused, 1);
    // Spent, they make room.
    support::run_until(&mut v, at(500), &mut beating);
    let (a, s) = pairs[256];
    let outs = JOB.deliver(&mut v, at(501), Encoder::new(KEY, a).suspect(a, 1, s, 0, 0));
    assert!(sent(&outs).0);
    assert_eq!(v.stats().quorum.ballots_refused, 1);
    assert_eq!(v.participation(), Participation::Active);
}
