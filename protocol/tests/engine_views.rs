//! Views and agreements at the Engine, over an in-memory network of a few
//! Engines (messages delivered in order, time moved by hand): user
//! agreements decide the AND of the flags everywhere, in call order; a
//! failure becomes a view change after the batching window, raised after
//! its `Failed` event; a decision's ranks that a rank did not know are
//! learned first; a decision naming a rank excludes it; a leave ends the
//! pending agreements; messages too far ahead are dropped and counted.

mod support;

use std::collections::VecDeque;

use ffd_protocol::agreement::Value;
use ffd_protocol::wire::{self, AgreementId, Encoder};
use ffd_protocol::{
    AgreeAbort, Cause, Engine, Event, Exclusion, HandleError, Input, Kind, Output, Participation,
    QuorumMode, Rank, SlotReading, Time, View,
};
use support::{Job, ms};

const KEY: u64 = 0x5151_7777_0000_0001;

const JOB: Job = Job::new(KEY, [0x24; 32]);

/// Engines on one ring by rank, delivering every send in order. The
/// start-up grace (1 s) keeps anyone from being declared by a timeout.
struct Net {
    engines: Vec<Engine>,
    alive: Vec<bool>,
    queue: VecDeque<(Rank, Rank, Vec<u8>)>,
    now: Time,
    events: Vec<Vec<Event>>,
    sent: [u64; Kind::COUNT],
    /// Lose every notice on the way (so that only the ranks told by hand
    /// know a failure).
    drop_notices: bool,
}

impl Net {
    fn new(n: u32) -> Net {
        let engines = (0..n)
            .map(|r| JOB.checker(support::config(QuorumMode::default()), n, r))
            .collect();
        let mut net = Net {
            engines,
            alive: vec![true; n as usize],
            queue: VecDeque::new(),
            now: Time::ZERO,
            events: vec![Vec::new(); n as usize],
            sent: [0; Kind::COUNT],
            drop_notices: false,
        };
        net.pump();
        net
    }

    /// Drains every Engine's outputs and delivers until nothing moves.
    fn pump(&mut self) {
        loop {
            for r in 0..self.engines.len() {
                while let Some(out) = self.engines[r].poll_output() {
                    match out {
                        Output::Send { to, message } => {
                            if let Some(k) = message.kind() {
                                self.sent[k.index()] += 1;
                            }
                            self.queue.push_back((r as Rank, to, message.to_vec()));
                        }
                        Output::Event(e) => self.events[r].push(e),
                        _ => {}
                    }
                }
            }
            let Some((from, to, bytes)) = self.queue.pop_front() else {
                return;
            };
            let notice = wire::peek_kind(&bytes) == Some(Kind::Notice);
            if self.alive[to as usize] && !(notice && self.drop_notices) {
                let input = Input::Message {
                    from: Some(from),
                    bytes: &bytes,
                };
                let _ = self.engines[to as usize].handle(self.now, input);
            }
        }
    }

    /// Moves time to `t` and runs every live Engine's due timers.
    fn advance_to(&mut self, t: Time) {
        self.now = t;
        for r in 0..self.engines.len() {
            if !self.alive[r] {
                continue;
            }
            if self.engines[r].next_deadline().is_some_and(|d| d <= t) {
                self.engines[r].handle_timeout(t, &SlotReading(0));
            }
        }
        self.pump();
    }

    fn handle(&mut self, r: Rank, input: Input<'_>) -> Result<(), HandleError> {
        let res = self.engines[r as usize].handle(self.now, input);
        self.pump();
        res
    }

    /// Tells rank `to` that `dead` (a rank that never sends) failed, by a
    /// notice in its name (the only link whose sequence numbers the test
    /// owns).
    fn notice(&mut self, dead: Rank, to: Rank) {
        self.hand_notice(dead, to, &[dead], &[]);
    }

    /// Tells rank `to` that `gone` (a rank that never sends) left, by its
    /// leave notice.
    fn leave_notice(&mut self, gone: Rank, to: Rank) {
        self.hand_notice(gone, to, &[], &[gone]);
    }

    fn hand_notice(&mut self, dead: Rank, to: Rank, failed: &[Rank], left: &[Rank]) {
        assert!(!self.alive[dead as usize]);
        let m = Encoder::new(KEY, dead).notice(dead, 0, failed, left);
        let bytes = JOB.seal_numbered(&m, 1, to);
        let input = Input::Message {
            from: Some(dead),
            bytes: &bytes,
        };
        let _ = self.engines[to as usize].handle(self.now, input);
        self.pump();
    }

    fn agreed(&self, r: Rank) -> Vec<(u64, u64, View)> {
        self.events[r as usize]
            .iter()
            .filter_map(|e| match e {
                Event::Agreed {
                    seq, flags, view, ..
                } => Some((*seq, *flags, view.clone())),
                _ => None,
            })
            .collect()
    }

    fn views(&self, r: Rank) -> Vec<(u64, Vec<Rank>)> {
        self.events[r as usize]
            .iter()
            .filter_map(|e| match e {
                Event::ViewChange { id, failed, .. } => Some((*id, failed.clone())),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn an_agreement_decides_the_and_of_the_flags_everywhere_in_two_log_n_hops() {
    let n = 8;
    let mut net = Net::new(n);
    for r in 0..n {
        net.handle(r, Input::Agree { flags: !(1 << r) }).unwrap();
        assert_eq!(net.engines[r as usize].agreements_called(), 1);
    }
    let nobody = View::default();
    for r in 0..n {
        assert_eq!(net.agreed(r), [(1, !0xff, nobody.clone())], "rank {r}");
        let hops = net.events[r as usize].iter().find_map(|e| match e {
            Event::Agreed { hops, .. } => Some(*hops),
            _ => None,
        });
        assert!(hops.unwrap() <= 2 * 3, "rank {r}: {hops:?} hops");
        assert!(net.engines[r as usize].agreements_settled());
    }
    // N - 1 Ups and N - 1 Downs.
    assert_eq!(net.sent[Kind::AgreeUp.index()], 7);
    assert_eq!(net.sent[Kind::AgreeDown.index()], 7);
}

#[test]
fn calls_are_decided_in_order_one_after_the_other() {
    let n = 4;
    let mut net = Net::new(n);
    // Rank 3 calls twice at once: the second waits for the first.
    net.handle(3, Input::Agree { flags: 1 }).unwrap();
    net.handle(3, Input::Agree { flags: 2 }).unwrap();
    assert_eq!(net.engines[3].agreements_called(), 2);
    assert_eq!(
        net.sent[Kind::AgreeUp.index()],
        1,
        "only agreement 1 started"
    );
    assert!(!net.engines[3].agreements_settled());
    for r in 0..3 {
        net.handle(r, Input::Agree { flags: u64::MAX }).unwrap();
    }
    assert_eq!(net.agreed(3).len(), 1, "agreement 2 waits for the others");
    for r in 0..3 {
        net.handle(r, Input::Agree { flags: 6 }).unwrap();
    }
    for r in 0..n {
        let got: Vec<(u64, u64)> = net.agreed(r).iter().map(|a| (a.0, a.1)).collect();
        assert_eq!(got, [(1, 1), (2, 2)], "rank {r}");
    }
}

#[test]
fn a_failure_becomes_a_view_after_the_batching_window_and_its_failed_event() {
    let n = 5;
    let mut net = Net::new(n);
    net.alive[4] = false;
    for r in 0..4 {
        net.notice(4, r);
    }
    assert_eq!(net.sent[Kind::AgreeUp.index()], 0, "not before the window");
    for r in 0..4 {
        assert_eq!(net.engines[r as usize].view_id(), 0);
        assert!(!net.engines[r as usize].agreements_settled());
    }
    // Half a period later every rank joins: view 1 names rank 4.
    net.advance_to(Time::ZERO + ms(5));
    for r in 0..4 {
        assert_eq!(net.views(r), [(1, vec![4])], "rank {r}");
        let ev = &net.events[r as usize];
        let failed_at = ev
            .iter()
            .position(|e| matches!(e, Event::Failed { rank: 4, .. }));
        let view_at = ev
            .iter()
            .position(|e| matches!(e, Event::ViewChange { .. }));
        assert!(failed_at < view_at, "rank {r}: {ev:?}");
        assert_eq!(net.engines[r as usize].view_id(), 1);
        assert!(net.engines[r as usize].agreements_settled());
    }
    // An agreement now names the view it was made in.
    for r in 0..4 {
        net.handle(r, Input::Agree { flags: u64::MAX }).unwrap();
    }
    for r in 0..4 {
        let view = View {
            id: 1,
            failed: vec![4],
        };
        assert_eq!(net.agreed(r), [(1, u64::MAX, view)], "rank {r}");
    }
}

#[test]
fn ranks_of_a_decision_unknown_here_are_learned_first() {
    // Tree rooted at 0: 0 -> {1, 2}, 1 -> {3}. Only rank 1 knows that its
    // child 3 failed; its notices are lost, so 0 and 2 wait a timeout for
    // them, then learn it from the decision.
    let n = 4;
    let mut net = Net::new(n);
    net.alive[3] = false;
    net.drop_notices = true;
    net.notice(3, 1);
    for r in 0..3 {
        net.handle(r, Input::Agree { flags: u64::MAX }).unwrap();
    }
    assert_eq!(net.agreed(1).len(), 1, "rank 1 knew every rank named");
    for r in [0, 2] {
        assert!(net.agreed(r).is_empty(), "rank {r} waits for 3's notice");
    }
    // The timeout is 100 ms; the start-up grace (1 s) declares nobody.
    for t in (10..=110).step_by(10) {
        net.advance_to(Time::ZERO + ms(t));
    }
    for r in [0, 2] {
        let ev = &net.events[r as usize];
        let failed_at = ev.iter().position(|e| {
            matches!(
                e,
                Event::Failed {
                    rank: 3,
                    cause: Cause::Notice,
                    detector: 0,
                    ..
                }
            )
        });
        let agreed_at = ev.iter().position(|e| matches!(e, Event::Agreed { .. }));
        assert!(
            failed_at.is_some() && failed_at < agreed_at,
            "rank {r}: {ev:?}"
        );
        assert!(net.engines[r as usize].is_failed(3));
    }
    for r in 0..3 {
        assert_eq!(net.agreed(r)[0].2.failed, [3], "rank {r}");
    }
}

#[test]
fn a_departure_named_by_a_decision_is_a_leave_once_its_notice_comes() {
    // As above, but rank 3 left: rank 1 has its leave notice, 0 and 2 get
    // theirs after the decision. They raise Left, not Failed, then the
    // decision, which names 3 (a rank that did not take part).
    let n = 4;
    let mut net = Net::new(n);
    net.alive[3] = false;
    net.drop_notices = true;
    net.leave_notice(3, 1);
    for r in 0..3 {
        net.handle(r, Input::Agree { flags: u64::MAX }).unwrap();
    }
    for r in [0, 2] {
        assert!(net.agreed(r).is_empty(), "rank {r} waits for 3's notice");
        net.leave_notice(3, r);
    }
    for r in 0..3 {
        let ev = &net.events[r as usize];
        assert!(
            !ev.iter().any(|e| matches!(e, Event::Failed { .. })),
            "rank {r}: {ev:?}"
        );
        let left_at = ev.iter().position(|e| matches!(e, Event::Left { rank: 3 }));
        let agreed_at = ev.iter().position(|e| matches!(e, Event::Agreed { .. }));
        assert!(left_at.is_some() && left_at < agreed_at, "rank {r}: {ev:?}");
        assert_eq!(net.agreed(r)[0].2.failed, [3], "rank {r}");
    }
}

#[test]
fn a_decision_naming_this_rank_excludes_it() {
    let mut net = Net::new(3);
    let down =
        Encoder::new(KEY, 0).agree_down(AgreementId::User(1), 1, 0, &Value::new(u64::MAX, &[1]));
    let bytes = JOB.seal_numbered(&down, 1, 1);
    net.handle(1, Input::Agree { flags: 0 }).unwrap();
    net.handle(
        1,
        Input::Message {
            from: Some(0),
            bytes: &bytes,
        },
    )
    .unwrap();
    assert_eq!(net.engines[1].participation(), Participation::Excluded);
    assert!(
        net.events[1].contains(&Event::SelfExcluded {
            by: 0,
            why: Exclusion::Named
        }),
        "{:?}",
        net.events[1]
    );
    assert!(net.events[1].contains(&Event::AgreeAborted {
        seq: 1,
        reason: AgreeAbort::Excluded
    }));
}

#[test]
fn a_leave_ends_the_pending_agreements_and_refuses_new_ones() {
    let mut net = Net::new(3);
    net.handle(2, Input::Agree { flags: 1 }).unwrap();
    net.handle(2, Input::Agree { flags: 2 }).unwrap();
    net.handle(2, Input::Leave).unwrap();
    let aborted: Vec<&Event> = net.events[2]
        .iter()
        .filter(|e| matches!(e, Event::AgreeAborted { .. }))
        .collect();
    assert_eq!(
        aborted,
        [
            &Event::AgreeAborted {
                seq: 1,
                reason: AgreeAbort::Left
            },
            &Event::AgreeAborted {
                seq: 2,
                reason: AgreeAbort::Left
            }
        ]
    );
    assert_eq!(
        net.handle(2, Input::Agree { flags: 3 }),
        Err(HandleError::NotActive)
    );
    assert!(net.engines[2].agreements_settled());
}

#[test]
fn messages_too_far_ahead_or_behind_are_dropped_and_counted() {
    let mut net = Net::new(4);
    let up = |id, seq| {
        let m = Encoder::new(KEY, 1).agree_up(id, 1, 0, &Value::new(7, &[]), None);
        JOB.seal_numbered(&m, seq, 0)
    };
    for (seq, (id, dropped)) in (1..).zip([
        (AgreementId::User(1), 0),
        (AgreementId::User(2), 0),
        (AgreementId::User(3), 1),
        (AgreementId::View(1), 1),
        (AgreementId::View(2), 1),
        (AgreementId::View(3), 2),
    ]) {
        let bytes = up(id, seq);
        net.handle(
            0,
            Input::Message {
                from: Some(1),
                bytes: &bytes,
            },
        )
        .unwrap();
        assert_eq!(
            net.engines[0].stats().views.agreement_messages_dropped,
            dropped,
            "{id:?}"
        );
    }
    // View 1 and 2 are past and current for nobody here: 1 is the next
    // (kept, and rank 0 joins it: as root it waits for its children), 2
    // one beyond (kept), 3 too far. User 1 and 2 are kept, 3 too far.
    assert_eq!(net.engines[0].view_id(), 0);
    assert_eq!(net.sent[Kind::AgreeUp.index()], 0, "rank 0 is the root");
}
