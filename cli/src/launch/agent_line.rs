//! The agent line protocol: one JSON object per line on an `ffd agent`'s
//! standard output, parsed into an [`AgentLine`].
//!
//! Owns: the reading of the contract between `ffd agent --stdin-control` and
//! `ffd run` (the event kinds and their fields). Must not: decide what a line
//! means for the job (that is the [`Timeline`](super::Timeline)'s), or fail
//! on anything an agent prints: an unknown event kind is an
//! [`AgentEvent::Unknown`], anything else unreadable is a [`LineError`] that
//! the launcher counts and shows with `--verbose`.

use serde_json::{Map, Value};

use ffd::protocol::Rank;

/// How a rank learned that another failed (`cause` of a `failed` line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A transport error on the heartbeat link (`inband`).
    Inband,
    /// The emitter's heartbeats stopped for longer than the timeout (`timeout`).
    Timeout,
    /// A notice broadcast by another rank (`notice`).
    Notice,
    /// A word this launcher does not know, kept as printed.
    Other(String),
}

impl Cause {
    fn from_word(word: &str) -> Cause {
        match word {
            "inband" => Cause::Inband,
            "timeout" => Cause::Timeout,
            "notice" => Cause::Notice,
            other => Cause::Other(other.to_owned()),
        }
    }

    /// The protocol's word (`inband`, `timeout`, `notice`), as in the JSON report.
    pub fn as_word(&self) -> &str {
        match self {
            Cause::Inband => "inband",
            Cause::Timeout => "timeout",
            Cause::Notice => "notice",
            Cause::Other(word) => word,
        }
    }

    /// The words a person reads in the timeline (`in-band`, `timeout`, `notice`).
    pub fn describe(&self) -> &str {
        match self {
            Cause::Inband => "in-band",
            other => other.as_word(),
        }
    }
}

/// What an agent said, by event kind.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    /// The detector is up (bootstrap done, ring links connected).
    Ready { pid: Option<u32>, core: Option<u32> },
    /// This rank learned that `rank` failed; `detector` first declared it.
    Failed {
        rank: Rank,
        cause: Cause,
        detector: Option<Rank>,
    },
    /// `rank` shut down cleanly.
    Left { rank: Rank },
    /// The others declared this rank failed; it stops participating.
    SelfExcluded,
    /// A warning: `rank`'s heartbeat was late by `late_ms`.
    SlowEmitter { rank: Rank, late_ms: Option<f64> },
    /// The agent's counters at exit, kept as printed.
    Stats(Value),
    /// The last line of a clean exit.
    Exit,
    /// An event kind this launcher does not know.
    Unknown { kind: String },
}

/// One line of an agent's standard output.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentLine {
    /// The rank the agent says it is (`me`), if it said.
    pub me: Option<Rank>,
    /// Milliseconds since the agent started (`t_ms`), if given.
    pub t_ms: Option<f64>,
    /// Wall-clock time in milliseconds since the Unix epoch (`unix_ms`), if given.
    pub unix_ms: Option<f64>,
    pub event: AgentEvent,
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
    #[error("is a `{event}` event without a valid `{field}` field")]
    MissingField {
        event: &'static str,
        field: &'static str,
    },
    #[error("has a field `{field}` that is not {expected}")]
    BadField {
        field: &'static str,
        expected: &'static str,
    },
}

impl AgentLine {
    /// Parses one line (without its newline).
    pub fn parse(text: &str) -> Result<AgentLine, LineError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| LineError::NotJson(e.to_string()))?;
        let Value::Object(obj) = value else {
            return Err(LineError::NotAnObject);
        };
        let kind = obj
            .get("event")
            .and_then(Value::as_str)
            .ok_or(LineError::NoEvent)?;
        let me = optional_rank(&obj, "me")?;
        let t_ms = optional_number(&obj, "t_ms")?;
        let unix_ms = optional_number(&obj, "unix_ms")?;
        let event = match kind {
            "ready" => AgentEvent::Ready {
                pid: optional_rank(&obj, "pid")?,
                core: optional_rank(&obj, "core")?,
            },
            "failed" => AgentEvent::Failed {
                rank: required_rank(&obj, "failed", "rank")?,
                cause: match obj.get("cause") {
                    Some(Value::String(word)) => Cause::from_word(word),
                    _ => {
                        return Err(LineError::MissingField {
                            event: "failed",
                            field: "cause",
                        });
                    }
                },
                detector: optional_rank(&obj, "detector")?,
            },
            "left" => AgentEvent::Left {
                rank: required_rank(&obj, "left", "rank")?,
            },
            "self_excluded" => AgentEvent::SelfExcluded,
            "slow_emitter" => AgentEvent::SlowEmitter {
                rank: required_rank(&obj, "slow_emitter", "rank")?,
                late_ms: optional_number(&obj, "late_ms")?,
            },
            "stats" => AgentEvent::Stats(obj.get("stats").cloned().unwrap_or(Value::Null)),
            "exit" => AgentEvent::Exit,
            other => AgentEvent::Unknown {
                kind: other.to_owned(),
            },
        };
        Ok(AgentLine {
            me,
            t_ms,
            unix_ms,
            event,
        })
    }
}

/// A field that may be absent or null, else a non-negative 32-bit integer.
fn optional_rank(obj: &Map<String, Value>, field: &'static str) -> Result<Option<u32>, LineError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or(LineError::BadField {
                field,
                expected: "a non-negative 32-bit integer",
            }),
    }
}

fn required_rank(
    obj: &Map<String, Value>,
    event: &'static str,
    field: &'static str,
) -> Result<u32, LineError> {
    optional_rank(obj, field)?.ok_or(LineError::MissingField { event, field })
}

/// A field that may be absent or null, else a finite number.
fn optional_number(
    obj: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<f64>, LineError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or(LineError::BadField {
                field,
                expected: "a number",
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_event_parses() {
        let ready = AgentLine::parse(
            r#"{"event":"ready","me":3,"t_ms":12.5,"unix_ms":1763800000123.4,"pid":1234,"core":null}"#,
        )
        .unwrap();
        assert_eq!(ready.me, Some(3));
        assert_eq!(ready.t_ms, Some(12.5));
        assert_eq!(ready.unix_ms, Some(1763800000123.4));
        assert_eq!(
            ready.event,
            AgentEvent::Ready {
                pid: Some(1234),
                core: None
            }
        );

        let failed = AgentLine::parse(
            r#"{"event":"failed","me":3,"rank":5,"cause":"inband","detector":4,"t_ms":1,"unix_ms":2}"#,
        )
        .unwrap();
        assert_eq!(
            failed.event,
            AgentEvent::Failed {
                rank: 5,
                cause: Cause::Inband,
                detector: Some(4)
            }
        );
        let cases = [
            (
                r#"{"event":"left","me":3,"rank":5}"#,
                AgentEvent::Left { rank: 5 },
            ),
            (
                r#"{"event":"self_excluded","me":3}"#,
                AgentEvent::SelfExcluded,
            ),
            (
                r#"{"event":"slow_emitter","me":3,"rank":2,"late_ms":37.0}"#,
                AgentEvent::SlowEmitter {
                    rank: 2,
                    late_ms: Some(37.0),
                },
            ),
            (
                r#"{"event":"stats","me":3,"stats":{"beats":10}}"#,
                AgentEvent::Stats(serde_json::json!({"beats": 10})),
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
    }

    #[test]
    fn unknown_causes_are_kept_and_words_round_trip() {
        let line = AgentLine::parse(r#"{"event":"failed","me":0,"rank":1,"cause":"oob"}"#).unwrap();
        let AgentEvent::Failed {
            cause, detector, ..
        } = line.event
        else {
            panic!("not a failed event");
        };
        assert_eq!(cause, Cause::Other("oob".into()));
        assert_eq!(detector, None);
        for word in ["inband", "timeout", "notice"] {
            assert_eq!(Cause::from_word(word).as_word(), word);
        }
        assert_eq!(Cause::Inband.describe(), "in-band");
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
                "`failed` event without a valid `rank`",
            ),
            (
                r#"{"event":"failed","me":3,"rank":1}"#,
                "without a valid `cause`",
            ),
            (r#"{"event":"left","me":-1,"rank":2}"#, "field `me`"),
            (r#"{"event":"exit","unix_ms":"soon"}"#, "field `unix_ms`"),
            (r#"{"event":"ready","pid":99999999999}"#, "field `pid`"),
        ];
        for (text, want) in bad {
            let err = AgentLine::parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
