//! The agent line protocol: one JSON object per line on an `ffd agent`'s
//! standard output, typed as an [`AgentLine`] that the agent writes and
//! `ffd run` reads.
//!
//! Owns: the contract between `ffd agent` and `ffd run` (the event kinds,
//! their fields and the [`Stamp`] every line carries), in one type that
//! both sides serialise. Must not: decide what a line means for the job
//! (that is the [`Timeline`](super::Timeline)'s), or fail on anything an
//! agent prints: an unknown event kind reads as [`AgentEvent::Unknown`],
//! anything else unreadable is a [`LineError`] that the launcher counts and
//! shows with `--verbose`.
//!
//! ```text
//! {"event":"ready","pid":1234,"core":1,"me":3,"t_ms":0.0,"unix_ms":...}
//! {"event":"failed","rank":5,"cause":"inband","detector":4,"hops":0,"epoch":1,
//!  "detail":"in-band, error completion FI_ECANCELED/ENOTCONN: proof","me":3,...}
//! {"event":"host_failed","host":1,"ranks":[1,4,7],"me":2,...}
//! {"event":"left","rank":5,"me":3,...}
//! {"event":"self_excluded","by":4,"why":"named","me":3,...}
//! {"event":"slow_emitter","rank":2,"late_ms":37.0,"me":3,...}
//! {"event":"payload","origin":1,"seq":0,"text":"revoke","me":3,...}
//! {"event":"view","id":1,"failed":[5],"hops":6,"me":3,...}
//! {"event":"agree","seq":1,"flags":18446744073709551615,"me":3,...}
//! {"event":"agreed","seq":1,"flags":18446744073709551615,"view":1,"failed":[5],"hops":6,"me":3,...}
//! {"event":"agree_aborted","seq":2,"reason":"left","me":3,...}
//! {"event":"stats","stats":{...},"me":3,...}
//! {"event":"exit","me":3,...}
//! ```
//!
//! The reader is lenient where the writer is not: the fields that are
//! `Option` here may be absent (a hand-written line need not stamp itself).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use ffd::protocol::{Cause, Rank};

/// What an agent said, by event kind (the `event` field).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The detector is up (bootstrap done, ring links connected).
    Ready {
        pid: Option<u32>,
        /// The core the progress thread is pinned to (null: unpinned).
        core: Option<u32>,
    },
    /// This rank learned that `rank` failed; `detector` first declared it.
    Failed {
        rank: Rank,
        cause: Cause,
        detector: Option<Rank>,
        /// Overlay hops the news travelled (0 if detected here).
        hops: Option<u16>,
        /// Failures this rank knew once it learned this one.
        epoch: Option<u64>,
        /// The evidence in words, for the detector's own declaration (e.g.
        /// `in-band, error completion FI_ECANCELED/ENOTCONN: proof`,
        /// `timeout: silence, confirmed by 6 of 8 live ranks`); `notice`
        /// for news from others.
        #[serde(default)]
        detail: Option<String>,
    },
    /// This rank declared every rank of host `host` failed in one notice.
    HostFailed { host: u32, ranks: Vec<Rank> },
    /// `rank` shut down cleanly.
    Left { rank: Rank },
    /// This rank stops participating: the others declared it failed (`why`
    /// = `named`, `by` told it), or its side of a partition holds no
    /// majority (`no_quorum`, `by` made the accusation that found none).
    SelfExcluded {
        by: Option<Rank>,
        #[serde(default)]
        why: Option<String>,
    },
    /// A warning: `rank`'s heartbeat was late by `late_ms`.
    SlowEmitter { rank: Rank, late_ms: Option<f64> },
    /// An application payload broadcast by `origin` (as text, lossily).
    Payload {
        origin: Rank,
        seq: u64,
        text: String,
    },
    /// View `id` was decided: `failed` are the ranks out of the job
    /// (failed or left), ascending.
    View {
        id: u64,
        failed: Vec<Rank>,
        /// The agreement's longest message chain.
        hops: Option<u16>,
    },
    /// The agent started its agreement number `seq` with `flags` (a line
    /// `agree` on its standard input).
    Agree { seq: u64, flags: u64 },
    /// This rank's agreement `seq` was decided: the AND of the flags, the
    /// decided view id and failed set.
    Agreed {
        seq: u64,
        flags: u64,
        view: u64,
        failed: Vec<Rank>,
        hops: Option<u16>,
    },
    /// This rank's agreement `seq` ended undecided (`left`, `excluded`).
    AgreeAborted { seq: u64, reason: String },
    /// The agent's counters at exit, kept as printed.
    Stats {
        #[serde(default)]
        stats: Value,
    },
    /// The last line of a clean exit.
    Exit,
    /// An event kind this reader does not know (never written).
    #[serde(skip)]
    Unknown { kind: String },
}

impl AgentEvent {
    /// The event kinds of the contract (the `event` values).
    pub const KINDS: [&'static str; 13] = [
        "ready",
        "failed",
        "host_failed",
        "left",
        "self_excluded",
        "slow_emitter",
        "payload",
        "view",
        "agree",
        "agreed",
        "agree_aborted",
        "stats",
        "exit",
    ];

    /// The `event` value of this line.
    pub fn kind(&self) -> &str {
        match self {
            AgentEvent::Ready { .. } => "ready",
            AgentEvent::Failed { .. } => "failed",
            AgentEvent::HostFailed { .. } => "host_failed",
            AgentEvent::Left { .. } => "left",
            AgentEvent::SelfExcluded { .. } => "self_excluded",
            AgentEvent::SlowEmitter { .. } => "slow_emitter",
            AgentEvent::Payload { .. } => "payload",
            AgentEvent::View { .. } => "view",
            AgentEvent::Agree { .. } => "agree",
            AgentEvent::Agreed { .. } => "agreed",
            AgentEvent::AgreeAborted { .. } => "agree_aborted",
            AgentEvent::Stats { .. } => "stats",
            AgentEvent::Exit => "exit",
            AgentEvent::Unknown { kind } => kind,
        }
    }
}

/// Who printed a line and when: the fields every line carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stamp {
    /// The rank the agent says it is (`me`).
    pub me: Option<Rank>,
    /// Milliseconds since the agent's detector started (`t_ms`). For a
    /// detector event, when the detector learned it, not when it was printed.
    pub t_ms: Option<f64>,
    /// The same instant as wall-clock milliseconds since the Unix epoch
    /// (`unix_ms`), so a launcher can merge ranks' timelines.
    pub unix_ms: Option<f64>,
}

/// One line of an agent's standard output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentLine {
    #[serde(flatten)]
    pub event: AgentEvent,
    #[serde(flatten)]
    pub stamp: Stamp,
}

/// Why a line is not an [`AgentLine`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("is not JSON ({0})")]
    NotJson(String),
    #[error("is not a JSON object")]
    NotAnObject,
    #[error("has no string field `event`")]
    NoEvent,
    /// A known kind (or the stamp of an unknown one) with a field missing
    /// or of the wrong type; `reason` names it.
    #[error("is not a valid `{event}` line ({reason})")]
    Invalid { event: String, reason: String },
}

impl AgentLine {
    /// The line as the agent prints it (without the newline).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Parses one line (without its newline).
    pub fn parse(text: &str) -> Result<AgentLine, LineError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| LineError::NotJson(e.to_string()))?;
        let kind = match &value {
            Value::Object(obj) => match obj.get("event") {
                Some(Value::String(kind)) => kind.clone(),
                _ => return Err(LineError::NoEvent),
            },
            _ => return Err(LineError::NotAnObject),
        };
        let invalid = |e: serde_json::Error| LineError::Invalid {
            event: kind.clone(),
            reason: e.to_string(),
        };
        if AgentEvent::KINDS.contains(&kind.as_str()) {
            AgentLine::deserialize(value).map_err(invalid)
        } else {
            let stamp = Stamp::deserialize(value).map_err(invalid)?;
            Ok(AgentLine {
                event: AgentEvent::Unknown { kind },
                stamp,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(event: AgentEvent) -> AgentLine {
        AgentLine {
            event,
            stamp: Stamp {
                me: Some(3),
                t_ms: Some(12.5),
                unix_ms: Some(1_763_800_000_123.4),
            },
        }
    }

    /// One line of every kind the agent writes.
    fn one_of_each() -> Vec<AgentLine> {
        [
            AgentEvent::Ready {
                pid: Some(1234),
                core: None,
            },
            AgentEvent::Failed {
                rank: 5,
                cause: Cause::InBand,
                detector: Some(4),
                hops: Some(0),
                epoch: Some(1),
                detail: Some("in-band, error completion FI_ECANCELED/ENOTCONN: proof".into()),
            },
            AgentEvent::HostFailed {
                host: 1,
                ranks: vec![1, 4, 7],
            },
            AgentEvent::Left { rank: 5 },
            AgentEvent::SelfExcluded {
                by: Some(4),
                why: Some("named".into()),
            },
            AgentEvent::SlowEmitter {
                rank: 2,
                late_ms: Some(37.0),
            },
            AgentEvent::Payload {
                origin: 1,
                seq: 0,
                text: "revoke".into(),
            },
            AgentEvent::View {
                id: 1,
                failed: vec![5],
                hops: Some(6),
            },
            AgentEvent::Agree {
                seq: 1,
                flags: u64::MAX,
            },
            AgentEvent::Agreed {
                seq: 1,
                flags: u64::MAX - 1,
                view: 1,
                failed: vec![5],
                hops: Some(6),
            },
            AgentEvent::AgreeAborted {
                seq: 2,
                reason: "left".into(),
            },
            AgentEvent::Stats {
                stats: serde_json::json!({"beats": 10}),
            },
            AgentEvent::Exit,
        ]
        .into_iter()
        .map(stamped)
        .collect()
    }

    #[test]
    fn every_kind_round_trips_with_its_documented_keys() {
        let lines = one_of_each();
        assert_eq!(lines.len(), AgentEvent::KINDS.len());
        let mut keys = Vec::new();
        for line in &lines {
            let text = line.to_json().unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value["event"], line.event.kind(), "{text}");
            assert!(AgentEvent::KINDS.contains(&line.event.kind()), "{text}");
            assert_eq!(AgentLine::parse(&text).unwrap(), *line, "{text}");
            let mut k: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
            k.sort();
            keys.push(k.join(","));
        }
        // The keys the documentation and the benchmarks read.
        let stamp = ["me", "t_ms", "unix_ms"];
        let want = [
            &["core", "event", "pid"][..],
            &[
                "cause", "detail", "detector", "epoch", "event", "hops", "rank",
            ],
            &["event", "host", "ranks"],
            &["event", "rank"],
            &["by", "event", "why"],
            &["event", "late_ms", "rank"],
            &["event", "origin", "seq", "text"],
            &["event", "failed", "hops", "id"],
            &["event", "flags", "seq"],
            &["event", "failed", "flags", "hops", "seq", "view"],
            &["event", "reason", "seq"],
            &["event", "stats"],
            &["event"],
        ];
        for (got, want) in keys.iter().zip(want) {
            let mut w: Vec<&str> = want.iter().chain(&stamp).copied().collect();
            w.sort_unstable();
            assert_eq!(*got, w.join(","));
        }
        let failed: Value = serde_json::from_str(&lines[1].to_json().unwrap()).unwrap();
        assert_eq!(failed["cause"], "inband");
    }

    #[test]
    fn hand_written_lines_need_only_the_event_and_its_required_fields() {
        let ready = AgentLine::parse(
            r#"{"event":"ready","me":3,"t_ms":12.5,"unix_ms":1763800000123.4,"pid":1234,"core":null}"#,
        )
        .unwrap();
        assert_eq!(ready, one_of_each()[0]);
        let cases = [
            (
                r#"{"event":"failed","me":3,"rank":5,"cause":"notice"}"#,
                AgentEvent::Failed {
                    rank: 5,
                    cause: Cause::Notice,
                    detector: None,
                    hops: None,
                    epoch: None,
                    detail: None,
                },
            ),
            (
                r#"{"event":"self_excluded","me":3}"#,
                AgentEvent::SelfExcluded {
                    by: None,
                    why: None,
                },
            ),
            (
                r#"{"event":"stats"}"#,
                AgentEvent::Stats { stats: Value::Null },
            ),
            (r#"{"event":"exit","me":3,"t_ms":9}"#, AgentEvent::Exit),
            (
                r#"{"event":"rejoined","me":3}"#,
                AgentEvent::Unknown {
                    kind: "rejoined".into(),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(AgentLine::parse(text).unwrap().event, want, "{text}");
        }
        let exit = AgentLine::parse(r#"{"event":"exit","t_ms":9}"#).unwrap();
        assert_eq!(
            exit.stamp,
            Stamp {
                me: None,
                t_ms: Some(9.0),
                unix_ms: None
            }
        );
        let unknown = AgentLine::parse(r#"{"event":"rejoined","me":3,"unix_ms":5}"#).unwrap();
        assert_eq!(
            (unknown.stamp.me, unknown.stamp.unix_ms),
            (Some(3), Some(5.0))
        );
    }

    #[test]
    fn an_unknown_kind_is_never_written() {
        let line = stamped(AgentEvent::Unknown {
            kind: "rejoined".into(),
        });
        assert!(line.to_json().is_err());
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let bad = [
            ("hello", "is not JSON"),
            ("[1,2]", "is not a JSON object"),
            (r#"{"me":3}"#, "no string field `event`"),
            (r#"{"event":7}"#, "no string field `event`"),
            (
                r#"{"event":"failed","me":3,"cause":"inband"}"#,
                "`failed` line (missing field `rank`)",
            ),
            (
                r#"{"event":"failed","me":3,"rank":1}"#,
                "`failed` line (missing field `cause`)",
            ),
            (
                r#"{"event":"failed","me":0,"rank":1,"cause":"oob"}"#,
                "unknown variant `oob`, expected one of `timeout`, `inband`, `notice`",
            ),
            (
                r#"{"event":"left","me":-1,"rank":2}"#,
                "`left` line (invalid value: integer `-1`, expected u32)",
            ),
            (
                r#"{"event":"exit","unix_ms":"soon"}"#,
                "`exit` line (invalid type: string \"soon\", expected f64)",
            ),
            (
                r#"{"event":"ready","pid":99999999999}"#,
                "integer `99999999999`, expected u32",
            ),
            (
                r#"{"event":"rejoined","me":"x"}"#,
                "`rejoined` line (invalid type: string \"x\", expected u32)",
            ),
        ];
        for (text, want) in bad {
            let err = AgentLine::parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
