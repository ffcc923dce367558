//! The `FFD_*` settings: every variable's good and bad forms (with the exact
//! error text), precedence between defaults, code and environment, and the
//! warnings. No test touches the process environment: each builds an `Env`.

use std::time::Duration;

use ffd::config::setting;
use ffd::config::{
    Config, ConfigBuilder, ConfigError, ConfigWarning, CoreChoice, Env, EnvPolicy, LivenessMode,
    LocalMode, LogLevel, ProgressMode, SchedPolicy, Source, SourceFilterMode, VARIABLES,
};
use ffd::protocol::{BcastKind, EngineConfig, InbandMode, QuorumMode, RingKind};

fn env(pairs: &[(&str, &str)]) -> Env {
    Env::from_pairs(pairs.iter().copied())
}

fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::builder().build_with_env(&env(pairs), EnvPolicy::Override)
}

fn err(pairs: &[(&str, &str)]) -> String {
    from(pairs).expect_err("should be rejected").to_string()
}

fn source(cfg: &Config, var: &str) -> Source {
    cfg.settings()
        .into_iter()
        .find(|s| s.var == var)
        .map(|s| s.source)
        .expect("known setting")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn defaults_are_documented_values() {
    let cfg = from(&[]).unwrap();
    assert_eq!(cfg.provider(), "tcp");
    assert_eq!(cfg.domain(), None);
    assert_eq!(cfg.period(), ms(10));
    assert_eq!(cfg.timeout(), ms(100));
    assert_eq!(cfg.inband(), InbandMode::Declare);
    assert_eq!(cfg.bcast(), BcastKind::Bmg);
    assert_eq!(cfg.ring(), RingKind::Topology);
    assert_eq!(cfg.ring_seed(), None);
    assert_eq!(cfg.core(), CoreChoice::Auto);
    assert_eq!(cfg.progress(), ProgressMode::Sleep);
    assert_eq!(cfg.local(), LocalMode::Auto);
    assert_eq!(cfg.log(), LogLevel::Warn);
    assert_eq!(cfg.event_queue(), 1024);
    assert!(cfg.deliver_own());
    assert_eq!(cfg.eagain_limit(), ms(30));
    assert_eq!(cfg.startup_grace(), Duration::from_secs(1));
    assert_eq!(cfg.hostname(), None);
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    assert!(cfg.settings().iter().all(|s| s.source == Source::Default));
    assert_eq!(cfg, Config::default());
}

#[test]
fn the_timing_defaults_are_the_protocols_and_reach_the_engine() {
    let cfg = Config::default();
    assert_eq!(
        (cfg.period(), cfg.timeout(), cfg.startup_grace()),
        (
            EngineConfig::DEFAULT_PERIOD,
            EngineConfig::DEFAULT_TIMEOUT,
            EngineConfig::DEFAULT_STARTUP_GRACE
        )
    );
    let engine = Config::builder()
        .startup_grace(ms(250))
        .build()
        .unwrap()
        .engine_config();
    assert_eq!(engine.startup_grace(), ms(250));
    assert_eq!(EngineConfig::default().startup_grace(), cfg.startup_grace());
    // The descriptors say the same as the variables' list.
    assert_eq!(
        setting::PERIOD.default_value(),
        EngineConfig::DEFAULT_PERIOD
    );
    let period = VARIABLES.iter().find(|v| v.name == "FFD_PERIOD").unwrap();
    assert_eq!(
        (period.accepted, period.default_text()),
        (setting::PERIOD.accepted, "10ms".to_owned())
    );
    assert_eq!(
        setting::TIMEOUT.parse("0s").unwrap_err().to_string(),
        "FFD_TIMEOUT=`0s` must be positive; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
}

#[test]
fn provider_and_domain() {
    let cfg = from(&[("FFD_PROVIDER", "verbs;ofi_rxm"), ("FFD_DOMAIN", "mlx5_0")]).unwrap();
    assert_eq!(cfg.provider(), "verbs;ofi_rxm");
    assert_eq!(cfg.domain(), Some("mlx5_0"));
    assert_eq!(source(&cfg, "FFD_DOMAIN"), Source::Env("FFD_DOMAIN"));
    for any in ["", "any", " ANY "] {
        assert_eq!(from(&[("FFD_DOMAIN", any)]).unwrap().domain(), None);
    }
    assert_eq!(
        err(&[("FFD_PROVIDER", "")]),
        "FFD_PROVIDER=`` is empty; accepted: a libfabric provider name, e.g. `tcp`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, `shm`"
    );
    assert_eq!(
        err(&[("FFD_PROVIDER", "tcp ofi")]),
        "FFD_PROVIDER=`tcp ofi` is not a provider name; accepted: a libfabric provider name, e.g. `tcp`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, `shm`"
    );
    assert_eq!(
        err(&[("FFD_DOMAIN", "eth 0")]),
        "FFD_DOMAIN=`eth 0` contains spaces; accepted: a fabric domain or interface name, e.g. `lo`, `mlx5_0`; empty or `any` for any"
    );
}

#[test]
fn period_and_timeout() {
    let cfg = from(&[("FFD_PERIOD", "500us"), ("FFD_TIMEOUT", "1.5s")]).unwrap();
    assert_eq!(cfg.period(), Duration::from_micros(500));
    assert_eq!(cfg.timeout(), ms(1500));
    assert_eq!(source(&cfg, "FFD_PERIOD"), Source::Env("FFD_PERIOD"));
    assert_eq!(
        err(&[("FFD_PERIOD", "10 parsecs")]),
        "FFD_PERIOD=`10 parsecs` is not a duration; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        err(&[("FFD_PERIOD", "10")]),
        "FFD_PERIOD=`10` has no unit; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        err(&[("FFD_PERIOD", "0ms")]),
        "FFD_PERIOD=`0ms` must be positive; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        err(&[("FFD_TIMEOUT", "")]),
        "FFD_TIMEOUT=`` is empty; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        err(&[("FFD_TIMEOUT", "99999999999s")]),
        "FFD_TIMEOUT=`99999999999s` is too large; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
}

#[test]
fn timeout_must_exceed_the_period_naming_both() {
    assert_eq!(
        err(&[("FFD_TIMEOUT", "10ms")]),
        "the timeout must exceed the period: FFD_TIMEOUT=`10ms` is not above the default period `10ms`"
    );
    assert_eq!(
        err(&[("FFD_PERIOD", "200ms")]),
        "the timeout must exceed the period: the default timeout `100ms` is not above FFD_PERIOD=`200ms`"
    );
    let code = Config::builder().period(ms(50)).timeout(ms(20)).build();
    assert_eq!(
        code.unwrap_err().to_string(),
        "the timeout must exceed the period: timeout `20ms` (set in code) is not above period `50ms` (set in code)"
    );
}

/// The two examples, and the edges of the safe ranges.
#[test]
fn timings_outside_the_safe_range_are_refused_naming_the_range() {
    assert_eq!(
        err(&[("FFD_PERIOD", "1ns")]),
        "FFD_PERIOD=`1ns` is outside the accepted range: a period of at least 100us (a shorter \
         one takes a core in heartbeats and wake-ups); FFD_UNSAFE_TIMING=1 accepts it anyway \
         (for experts)"
    );
    assert_eq!(
        err(&[("FFD_TIMEOUT", "18446744073709551615ns")]),
        "FFD_TIMEOUT=`18446744073709551615ns` is outside the accepted range: a timeout of at \
         most 600s (a longer one effectively disables detection); FFD_UNSAFE_TIMING=1 accepts \
         it anyway (for experts)"
    );
    assert_eq!(
        Config::builder()
            .period(Duration::from_micros(99))
            .build()
            .unwrap_err()
            .to_string(),
        "period `99us` (set in code) is outside the accepted range: a period of at least 100us \
         (a shorter one takes a core in heartbeats and wake-ups); FFD_UNSAFE_TIMING=1 accepts \
         it anyway (for experts)"
    );
    // The edges are inside.
    let edges = from(&[("FFD_PERIOD", "100us"), ("FFD_TIMEOUT", "600s")]).unwrap();
    assert_eq!(
        (edges.period(), edges.timeout()),
        (Duration::from_micros(100), Duration::from_secs(600))
    );
    assert!(from(&[("FFD_TIMEOUT", "600.000000001s")]).is_err());
    // The expert override, by variable or in code; the other checks stay.
    let cfg = from(&[
        ("FFD_PERIOD", "1us"),
        ("FFD_TIMEOUT", "3600s"),
        ("FFD_UNSAFE_TIMING", "1"),
    ])
    .unwrap();
    assert_eq!(
        (cfg.period(), cfg.timeout(), cfg.unsafe_timing()),
        (Duration::from_micros(1), Duration::from_secs(3600), true)
    );
    assert_eq!(
        source(&cfg, "FFD_UNSAFE_TIMING"),
        Source::Env("FFD_UNSAFE_TIMING")
    );
    let code = Config::builder()
        .period(Duration::from_nanos(1))
        .unsafe_timing(true)
        .build()
        .unwrap();
    assert_eq!(code.period(), Duration::from_nanos(1));
    assert!(
        err(&[
            ("FFD_PERIOD", "1ms"),
            ("FFD_TIMEOUT", "1ms"),
            ("FFD_UNSAFE_TIMING", "1")
        ])
        .starts_with("the timeout must exceed the period")
    );
    assert_eq!(
        err(&[("FFD_UNSAFE_TIMING", "yes")]),
        "FFD_UNSAFE_TIMING=`yes` is not recognised; accepted: 0|1"
    );
}

#[test]
fn a_timeout_under_three_periods_is_a_warning() {
    let cfg = from(&[("FFD_TIMEOUT", "25ms")]).unwrap();
    assert_eq!(
        cfg.warnings(),
        [ConfigWarning::ShortTimeout {
            timeout: ms(25),
            period: ms(10)
        }]
    );
    assert_eq!(
        cfg.warnings()[0].to_string(),
        "the timeout 25ms is less than 3 periods of 10ms: one late heartbeat may cause a false positive"
    );
    assert!(
        from(&[("FFD_TIMEOUT", "30ms")])
            .unwrap()
            .warnings()
            .is_empty()
    );
}

#[test]
fn protocol_choices() {
    let cfg = from(&[
        ("FFD_INBAND", "Suspect"),
        ("FFD_BCAST", "chord"),
        ("FFD_RING", "shuffle"),
    ])
    .unwrap();
    assert_eq!(cfg.inband(), InbandMode::Suspect);
    assert_eq!(cfg.bcast(), BcastKind::Chord);
    assert_eq!(cfg.ring(), RingKind::Shuffle);
    assert_eq!(
        err(&[("FFD_INBAND", "maybe")]),
        "FFD_INBAND=`maybe` is not recognised; accepted: declare|suspect|off"
    );
    assert_eq!(
        err(&[("FFD_BCAST", "tree")]),
        "FFD_BCAST=`tree` is not recognised; accepted: bmg|chord"
    );
    assert_eq!(
        err(&[("FFD_RING", "random")]),
        "FFD_RING=`random` is not recognised; accepted: topology|shuffle|rank"
    );
}

#[test]
fn ring_seed() {
    assert_eq!(
        from(&[("FFD_RING_SEED", "42")]).unwrap().ring_seed(),
        Some(42)
    );
    assert_eq!(
        from(&[("FFD_RING_SEED", "18446744073709551615")])
            .unwrap()
            .ring_seed(),
        Some(u64::MAX)
    );
    assert_eq!(
        err(&[("FFD_RING_SEED", "-1")]),
        "FFD_RING_SEED=`-1` is not a non-negative integer; accepted: an unsigned 64-bit integer, e.g. `42`"
    );
    assert_eq!(
        err(&[("FFD_RING_SEED", "18446744073709551616")]),
        "FFD_RING_SEED=`18446744073709551616` is too large; accepted: an unsigned 64-bit integer, e.g. `42`"
    );
}

#[test]
fn core_progress_log() {
    assert_eq!(
        from(&[("FFD_CORE", "none")]).unwrap().core(),
        CoreChoice::None
    );
    assert_eq!(
        from(&[("FFD_CORE", "AUTO")]).unwrap().core(),
        CoreChoice::Auto
    );
    assert_eq!(
        from(&[("FFD_CORE", "3")]).unwrap().core(),
        CoreChoice::Cpu(3)
    );
    assert_eq!(
        err(&[("FFD_CORE", "-1")]),
        "FFD_CORE=`-1` is not recognised; accepted: auto|none|<cpu index>, e.g. `3`"
    );
    assert_eq!(
        err(&[("FFD_CORE", "99999999999")]),
        "FFD_CORE=`99999999999` is too large; accepted: auto|none|<cpu index>, e.g. `3`"
    );
    assert_eq!(
        from(&[("FFD_PROGRESS", "spin")]).unwrap().progress(),
        ProgressMode::Spin
    );
    assert_eq!(
        err(&[("FFD_PROGRESS", "busy")]),
        "FFD_PROGRESS=`busy` is not recognised; accepted: sleep|spin"
    );
    assert_eq!(
        from(&[("FFD_SCHED", "FIFO")]).unwrap().sched(),
        SchedPolicy::Fifo
    );
    assert_eq!(
        err(&[("FFD_SCHED", "rr")]),
        "FFD_SCHED=`rr` is not recognised; accepted: normal|boost|fifo"
    );
    assert_eq!(from(&[]).unwrap().sched(), SchedPolicy::Boost);
    assert_eq!(from(&[]).unwrap().source_filter(), SourceFilterMode::Auto);
    assert_eq!(
        from(&[("FFD_SOURCE_FILTER", "OFF")])
            .unwrap()
            .source_filter(),
        SourceFilterMode::Off
    );
    assert_eq!(
        err(&[("FFD_SOURCE_FILTER", "yes")]),
        "FFD_SOURCE_FILTER=`yes` is not recognised; accepted: auto|on|off"
    );
    assert_eq!(
        from(&[("FFD_SCHED", "Normal")]).unwrap().sched(),
        SchedPolicy::Normal
    );
    for (text, level) in [
        ("off", LogLevel::Off),
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("Info", LogLevel::Info),
        ("debug", LogLevel::Debug),
    ] {
        assert_eq!(from(&[("FFD_LOG", text)]).unwrap().log(), level);
    }
    assert_eq!(
        err(&[("FFD_LOG", "trace")]),
        "FFD_LOG=`trace` is not recognised; accepted: off|error|warn|info|debug"
    );
}

#[test]
fn deliver_own() {
    assert!(!from(&[("FFD_DELIVER_OWN", "no")]).unwrap().deliver_own());
    let cfg = from(&[("FFD_DELIVER_OWN", "Yes")]).unwrap();
    assert!(cfg.deliver_own() && cfg.engine_config().deliver_own);
    assert!(
        !from(&[("FFD_DELIVER_OWN", "no")])
            .unwrap()
            .engine_config()
            .deliver_own
    );
    assert_eq!(
        err(&[("FFD_DELIVER_OWN", "1")]),
        "FFD_DELIVER_OWN=`1` is not recognised; accepted: yes|no"
    );
}

#[test]
fn event_queue() {
    assert_eq!(from(&[("FFD_EVENT_QUEUE", "1")]).unwrap().event_queue(), 1);
    assert_eq!(
        from(&[("FFD_EVENT_QUEUE", "1048576")])
            .unwrap()
            .event_queue(),
        1 << 20
    );
    for (bad, problem) in [
        ("0", "is out of range"),
        ("1048577", "is out of range"),
        ("1k", "is not a non-negative integer"),
    ] {
        assert_eq!(
            err(&[("FFD_EVENT_QUEUE", bad)]),
            format!(
                "FFD_EVENT_QUEUE=`{bad}` {problem}; accepted: an integer from 1 to 1048576, e.g. `1024`"
            )
        );
    }
    assert_eq!(
        Config::builder()
            .event_queue(0)
            .build()
            .unwrap_err()
            .to_string(),
        "event_queue `0` set in code is out of range; accepted: an integer from 1 to 1048576, e.g. `1024`"
    );
}

#[test]
fn eagain_limit_is_three_periods_at_most_the_timeout_unless_set() {
    let cfg = from(&[("FFD_TIMEOUT", "300ms")]).unwrap();
    assert_eq!(cfg.eagain_limit(), ms(30), "3 × the 10ms period");
    let cfg = from(&[("FFD_PERIOD", "50ms"), ("FFD_TIMEOUT", "120ms")]).unwrap();
    assert_eq!(cfg.eagain_limit(), ms(120), "never beyond the timeout");
    let cfg = from(&[("FFD_EAGAIN_LIMIT", "AUTO"), ("FFD_PERIOD", "20ms")]).unwrap();
    assert_eq!(cfg.eagain_limit(), ms(60));
    let cfg = from(&[("FFD_EAGAIN_LIMIT", "50ms")]).unwrap();
    assert_eq!(cfg.eagain_limit(), ms(50));
    let cfg = from(&[("FFD_EAGAIN_LIMIT", "timeout"), ("FFD_TIMEOUT", "1s")]).unwrap();
    assert_eq!(cfg.eagain_limit(), Duration::from_secs(1));
    assert_eq!(
        err(&[("FFD_EAGAIN_LIMIT", "0s")]),
        "FFD_EAGAIN_LIMIT=`0s` must be positive; accepted: `auto`, `timeout`, or a number with a unit ns|us|ms|s, e.g. `50ms`"
    );
    assert_eq!(
        err(&[("FFD_EAGAIN_LIMIT", "forever")]),
        "FFD_EAGAIN_LIMIT=`forever` is not a duration; accepted: `auto`, `timeout`, or a number with a unit ns|us|ms|s, e.g. `50ms`"
    );
}

#[test]
fn startup_grace_and_hostname() {
    let cfg = from(&[("FFD_STARTUP_GRACE", "0s"), ("FFD_HOSTNAME", "node17")]).unwrap();
    assert_eq!(cfg.startup_grace(), Duration::ZERO);
    assert_eq!(cfg.hostname(), Some("node17"));
    assert_eq!(
        err(&[("FFD_STARTUP_GRACE", "soon")]),
        "FFD_STARTUP_GRACE=`soon` is not a duration; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        err(&[("FFD_HOSTNAME", "")]),
        "FFD_HOSTNAME=`` is empty; accepted: a host name without spaces, e.g. `node17`"
    );
}

#[test]
fn quorum_is_majority_by_default_or_off() {
    assert_eq!(
        Config::default().engine_config().quorum,
        QuorumMode::Majority
    );
    for (text, mode) in [("majority", QuorumMode::Majority), ("OFF", QuorumMode::Off)] {
        let cfg = from(&[("FFD_QUORUM", text)]).unwrap();
        assert_eq!(cfg.engine_config().quorum, mode, "{text}");
    }
    assert_eq!(
        err(&[("FFD_QUORUM", "half")]),
        "FFD_QUORUM=`half` is not recognised; accepted: majority|off"
    );
}

#[test]
fn health_max_is_a_small_positive_integer() {
    assert_eq!(Config::default().engine_config().health_max, 4);
    let cfg = from(&[("FFD_HEALTH_MAX", "1")]).unwrap();
    assert_eq!(cfg.engine_config().health_max, 1);
    for bad in ["0", "17"] {
        assert_eq!(
            err(&[("FFD_HEALTH_MAX", bad)]),
            format!(
                "FFD_HEALTH_MAX=`{bad}` is out of range; accepted: an integer from 1 to 16, e.g. `4`"
            )
        );
    }
}

#[test]
fn code_settings_are_taken_and_marked_as_code() {
    let cfg = Config::builder()
        .provider("shm")
        .domain("lo")
        .period(ms(2))
        .timeout(ms(20))
        .unsafe_timing(false)
        .inband(InbandMode::Off)
        .quorum(QuorumMode::Off)
        .bcast(BcastKind::Chord)
        .ring(RingKind::Rank)
        .ring_seed(7)
        .core(CoreChoice::Cpu(1))
        .progress(ProgressMode::Spin)
        .sched(SchedPolicy::Fifo)
        .local(LocalMode::Off)
        .source_filter(SourceFilterMode::On)
        .liveness(LivenessMode::Off)
        .log(LogLevel::Debug)
        .event_queue(16)
        .deliver_own(false)
        .eagain_limit(ms(5))
        .startup_grace(ms(200))
        .health_max(2)
        .hostname("a")
        .build()
        .unwrap();
    assert!(
        cfg.settings().iter().all(|s| s.source == Source::Code),
        "{cfg:?}"
    );
    let engine = cfg.engine_config();
    assert_eq!(
        (
            engine.period,
            engine.timeout,
            engine.inband,
            engine.quorum,
            engine.bcast,
            engine.ring,
            engine.ring_seed,
            engine.deliver_own
        ),
        (
            ms(2),
            ms(20),
            InbandMode::Off,
            QuorumMode::Off,
            BcastKind::Chord,
            RingKind::Rank,
            7,
            false
        )
    );
    assert_eq!(engine.health_max, 2);
    assert_eq!(
        Config::builder()
            .period(Duration::ZERO)
            .build()
            .unwrap_err()
            .to_string(),
        "period `0ns` set in code must be positive; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        Config::builder().provider("").build().unwrap_err(),
        ConfigError::InvalidInCode {
            setting: "provider",
            value: String::new(),
            problem: "is empty".into(),
            accepted: VARIABLES[0].accepted,
        }
    );
}

#[test]
fn build_ignores_the_environment() {
    // `build` has no environment to read; the process's may hold anything.
    let cfg = Config::builder().period(ms(5)).build().unwrap();
    assert_eq!(cfg.period(), ms(5));
    assert_eq!(source(&cfg, "FFD_TIMEOUT"), Source::Default);
}

#[test]
fn precedence_override_env_beats_code_beats_default() {
    let e = env(&[("FFD_PERIOD", "20ms")]);
    let b = || Config::builder().period(ms(5)).timeout(ms(500));
    let cfg = b().build_with_env(&e, EnvPolicy::Override).unwrap();
    assert_eq!(cfg.period(), ms(20));
    assert_eq!(source(&cfg, "FFD_PERIOD"), Source::Env("FFD_PERIOD"));
    assert_eq!(cfg.timeout(), ms(500));
    assert_eq!(source(&cfg, "FFD_TIMEOUT"), Source::Code);
    assert_eq!(source(&cfg, "FFD_RING"), Source::Default);
    assert!(cfg.warnings().is_empty());

    let cfg = b().build_with_env(&e, EnvPolicy::Fill).unwrap();
    assert_eq!(cfg.period(), ms(5));
    assert_eq!(source(&cfg, "FFD_PERIOD"), Source::Code);
    assert_eq!(
        cfg.warnings(),
        [ConfigWarning::Ignored {
            var: "FFD_PERIOD",
            value: "20ms".into()
        }]
    );
    assert_eq!(
        cfg.warnings()[0].to_string(),
        "FFD_PERIOD=`20ms` is ignored: the application sets this setting in code"
    );
    // Fill still takes the environment where code is silent.
    let cfg = b()
        .build_with_env(&env(&[("FFD_RING", "rank")]), EnvPolicy::Fill)
        .unwrap();
    assert_eq!(cfg.ring(), RingKind::Rank);
    assert_eq!(source(&cfg, "FFD_RING"), Source::Env("FFD_RING"));
}

#[test]
fn an_environment_error_wins_over_a_good_code_value_under_override() {
    let e = env(&[("FFD_TIMEOUT", "lots")]);
    let b = || Config::builder().timeout(ms(500));
    assert!(matches!(
        b().build_with_env(&e, EnvPolicy::Override),
        Err(ConfigError::Invalid {
            var: "FFD_TIMEOUT",
            ..
        })
    ));
    // Under Fill the shadowed value is not parsed, only reported.
    assert_eq!(
        b().build_with_env(&e, EnvPolicy::Fill).unwrap().timeout(),
        ms(500)
    );
}

#[test]
fn unknown_variables_are_warned_about_with_a_suggestion() {
    let cfg = from(&[
        ("FFD_PERIDO", "5ms"),
        ("ffd_timeout", "1s"),
        ("FFD_COLOUR", "blue"),
        ("HOME", "/root"),
        ("MY_FFD_PERIOD", "1ms"),
    ])
    .unwrap();
    assert_eq!(cfg.period(), ms(10), "a misspelt variable is not read");
    let texts: Vec<String> = cfg.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        texts,
        [
            "FFD_COLOUR is not an ffd variable and is ignored",
            "FFD_PERIDO is not an ffd variable and is ignored (did you mean FFD_PERIOD?)",
            "ffd_timeout is not an ffd variable and is ignored (did you mean FFD_TIMEOUT?)",
        ]
    );
}

#[test]
fn bootstrap_variables_are_known_to_the_config() {
    let cfg = from(&[
        ("FFD_BOOTSTRAP", "127.0.0.1:5000"),
        ("FFD_RANK", "0"),
        ("FFD_SIZE", "2"),
        ("FFD_BOOTSTRAP_TIMEOUT", "5s"),
    ])
    .unwrap();
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
}

#[test]
fn describe_lists_every_setting_with_its_origin() {
    let cfg = Config::builder()
        .timeout(ms(300))
        .build_with_env(&env(&[("FFD_PERIOD", "20ms")]), EnvPolicy::Override)
        .unwrap();
    let text = cfg.describe();
    let line = |var: &str| {
        text.lines()
            .find(|l| l.starts_with(var))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    assert_eq!(
        line("FFD_PERIOD").as_deref(),
        Some("FFD_PERIOD 20ms env FFD_PERIOD")
    );
    assert_eq!(
        line("FFD_TIMEOUT ").as_deref(),
        Some("FFD_TIMEOUT 300ms code")
    );
    assert_eq!(
        line("FFD_RING ").as_deref(),
        Some("FFD_RING topology default")
    );
    assert_eq!(
        line("FFD_EAGAIN_LIMIT").as_deref(),
        Some("FFD_EAGAIN_LIMIT auto (60ms) default")
    );
    assert_eq!(text.lines().count(), cfg.settings().len());
}

#[test]
fn every_displayed_value_parses_back_to_the_same_config() {
    let cfg = Config::builder()
        .period(Duration::from_micros(1500))
        .timeout(ms(45))
        .core(CoreChoice::Cpu(2))
        .ring_seed(9)
        .eagain_limit(ms(7))
        .domain("lo")
        .hostname("h")
        .build()
        .unwrap();
    let pairs: Vec<(String, String)> = cfg
        .settings()
        .into_iter()
        .filter(|s| !s.value.contains('('))
        .map(|s| (s.var.to_owned(), s.value))
        .collect();
    let again = ConfigBuilder::default()
        .build_with_env(&Env::from_pairs(pairs), EnvPolicy::Override)
        .unwrap();
    let values = |c: &Config| {
        c.settings()
            .into_iter()
            .map(|s| s.value)
            .collect::<Vec<_>>()
    };
    assert_eq!(values(&again), values(&cfg));
}
