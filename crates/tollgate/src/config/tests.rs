//! Reading the whole config file: every section, the errors with their positions, and what a reload reports.
use super::*;

#[test]
fn empty_file_is_all_defaults() {
    let c = ConfigFile::parse(Path::new("t.toml"), "").unwrap();
    assert!(c.policy.is_empty());
    assert_eq!(c.store.flush_interval, Duration::from_millis(100));
    assert!(c.gateway.is_none());
}

#[test]
fn example_file_is_valid() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tollgate.toml"));
    let c = ConfigFile::load(path).unwrap();
    assert!(!c.policy.is_empty());
}

#[test]
fn errors_carry_file_line_and_column() {
    let src = "[server]\nlisten = \"127.0.0.1:8080\"\nlisten_typo = 1\n";
    let e = ConfigFile::parse(Path::new("conf/t.toml"), src).unwrap_err().to_string();
    assert!(e.starts_with("conf/t.toml:3:1: "), "{e}");
    assert!(e.contains("listen_typo"), "{e}");
    let src = "[server]\nlisten = \"not an address\"\n";
    let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
    assert!(e.starts_with("t.toml:2:10: "), "{e}");
}

#[test]
fn acme_example_starts_a_gateway() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/acme.toml"));
    let c = ConfigFile::load(path).unwrap();
    let g = c.gateway.unwrap();
    assert_eq!(g.route.len(), 1);
    assert_eq!(g.partner.len(), 3);
}

#[test]
fn gateway_errors_name_the_key() {
    let src = "[gateway]\n[[gateway.route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"fortnight\"\ndeliver = \"dir:x\"\n";
    let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
    let want = "t.toml:6:8: [[gateway.route]] #1 (name = \"S\") unit = \"fortnight\": ";
    assert!(e.starts_with(want), "{e}");
    // A missing key names the table, and for an array the entry by number and name.
    let route = |name: &str, limit: &str| {
        format!(
            "[[gateway.route]]\nname = \"{name}\"\ndocuments = [\"214\"]\n{limit}unit = \"day\"\ndeliver = \"dir:x\"\n\n"
        )
    };
    let src = format!("[gateway]\n{}{}", route("A", "limit = 1\n"), route("B", ""));
    let e = ConfigFile::parse(Path::new("t.toml"), &src).unwrap_err().to_string();
    let want = "t.toml:9:1: [[gateway.route]] #2 (name = \"B\"): missing field `limit`";
    assert_eq!(e, want);
    // A rule over several keys points at the offending key too.
    let src = "[gateway]\nmax_upload_bytes = 10\nupload_budget_bytes = 9\n";
    let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
    assert!(e.starts_with("t.toml:3:23: [gateway] gateway.upload_budget_bytes = 9: "), "{e}");
}

#[test]
fn listener_limits_are_read_and_zero_is_refused() {
    let src = "[server]\nheader_timeout_ms = 5000\nbody_timeout_ms = 7000\nmax_connections = 10\n\
               body_min_rate_bytes = 300\n";
    let l = ConfigFile::parse(Path::new("t.toml"), src).unwrap().server.limits();
    assert_eq!(l.header_timeout.as_millis(), 5000);
    assert_eq!(l.body_timeout.as_millis(), 7000);
    assert_eq!(l.body_min_rate.get(), 300);
    assert_eq!(l.max_connections.get(), 10);
    let d = ConfigFile::default().server.limits();
    assert!(d.header_timeout.as_secs() <= 30);
    assert!(d.max_connections.get() >= 1000);
    for (src, at, key) in [
        ("[server]\nheader_timeout_ms = 0\n", "2:21", "header_timeout_ms = 0: "),
        ("[server]\nbody_timeout_ms = 0\n", "2:19", "body_timeout_ms = 0: "),
        ("[server]\nbody_timeout_ms = 99999999999\n", "2:19", "body_timeout_ms = 99999999999"),
        ("[server]\nmax_connections = 0\n", "2:19", "max_connections = 0: "),
        ("[server]\nbody_min_rate_bytes = 0\n", "2:23", "body_min_rate_bytes = 0: must be"),
        ("[server]\nlog_format = \"yaml\"\n", "2:14", "log_format = \"yaml\": expected"),
        ("[server]\nusage_history = \"no\"\n", "2:17", "usage_history = \"no\": expected true"),
        ("[server]\nusage_max_ids = 0\n", "2:17", "usage_max_ids = 0: must be between"),
        ("[server]\nconsole_max_counters = 0\n", "2:24", "console_max_counters = 0: must be"),
    ] {
        let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
        assert!(e.starts_with(&format!("t.toml:{at}: [server] {key}")), "{e}");
    }
    let e = ConfigFile::parse(Path::new("t.toml"), "[server]\nmax_connections = -1\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:2:"), "{e}");
}

#[test]
fn usage_history_is_on_by_default_and_can_be_turned_off() {
    let on = ConfigFile::default().server.usage().unwrap();
    assert_eq!(on.max_ids, tollgate_server::usage::DEFAULT_MAX_IDS);
    let src = "[server]\nusage_max_ids = 5\n";
    assert_eq!(
        ConfigFile::parse(Path::new("t.toml"), src).unwrap().server.usage().unwrap().max_ids,
        5
    );
    let src = "[server]\nusage_history = false\n";
    assert!(ConfigFile::parse(Path::new("t.toml"), src).unwrap().server.usage().is_none());
}

#[test]
fn redis_needs_a_url() {
    let e = ConfigFile::parse(Path::new("t.toml"), "[store]\nkind = \"redis\"\n").unwrap_err();
    let e = e.to_string();
    assert!(e.starts_with("t.toml:1:") && e.contains("needs url"), "{e}");
    let src = "[store]\nkind = \"redis\"\nurl = \"redis://h:6379/\"\n";
    let c = ConfigFile::parse(Path::new("t.toml"), src).unwrap();
    assert_eq!(c.store.kind, Some("redis://h:6379/".parse().unwrap()));
}

#[test]
fn store_keys_are_located_and_name_key_and_value() {
    for (src, at, needle) in [
        ("[store]\nstore_unavailable = \"maybe\"\n", "2:21", "maybe"),
        ("[store]\nkind = \"postgres\"\n", "2:8", "kind = \"postgres\": "),
        ("[store]\nkind = \"redis\"\nurl = \"http://h\"\n", "3:7", "url = \"http://h\": "),
        ("[store]\nflush_interval_ms = 0\n", "2:21", "flush_interval_ms = 0: "),
        ("[store]\ntimeout_ms = 0\n", "2:14", "timeout_ms = 0: "),
        ("[store]\nflush_interval_ms = -5\n", "2:21", "-5"),
    ] {
        let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
        assert!(e.starts_with(&format!("t.toml:{at}: ")), "{src}: {e}");
        assert!(e.contains(needle), "{src}: {e}");
    }
    let src = "[store]\nflush_interval_ms = 5\ntimeout_ms = 7\nstore_unavailable = \"deny\"\n";
    let s = ConfigFile::parse(Path::new("t.toml"), src).unwrap().store;
    assert_eq!(s.flush_interval, Duration::from_millis(5));
    assert_eq!(s.timeout, Some(Duration::from_millis(7)));
    assert_eq!(s.store_unavailable, OnStoreUnavailable::Deny);
}

#[test]
fn client_rules_over_several_tables_name_the_file() {
    let src = "[[client]]\nkey = \"k\"\nname = \"a\"\n[[client]]\nkey = \"k\"\nname = \"b\"\n";
    let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
    assert!(e.starts_with("t.toml: [[client]] #2"), "{e}");
    assert!(!e.contains("\"k\""), "the key is not shown: {e}");
}

#[test]
fn the_store_flag_and_the_file_give_one_type() {
    assert_eq!("memory".parse(), Ok(StoreKind::Memory));
    assert_eq!("embedded".parse(), Ok(StoreKind::Embedded));
    let redis: StoreKind = "rediss://h:6380/".parse().unwrap();
    assert_eq!(redis, StoreKind::Redis("rediss://h:6380/".parse().unwrap()));
    assert!("postgres://x".parse::<StoreKind>().is_err());
    assert!("redis".parse::<StoreKind>().is_err());
    let src = "[store]\nkind = \"memory\"\n";
    let c = ConfigFile::parse(Path::new("t.toml"), src).unwrap();
    assert_eq!(c.store.kind, Some(StoreKind::Memory));
}

#[test]
fn cluster_goes_with_a_redis_url_and_takes_true_or_false() {
    let src = "[store]\nkind = \"redis\"\nurl = \"redis://h:7000/\"\ncluster = true\n";
    let c = ConfigFile::parse(Path::new("t.toml"), src).unwrap();
    assert!(c.store.cluster);
    let src = "[store]\nkind = \"redis\"\nurl = \"redis://h:7000/\"\ncluster = \"yes\"\n";
    let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
    let want = "t.toml:4:11: [store] cluster = \"yes\": expected true or false";
    assert!(e.starts_with(want), "{e}");
    let e = ConfigFile::parse(Path::new("t.toml"), "[store]\nkind = \"memory\"\ncluster = true\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:1:") && e.contains("cluster = true needs kind"), "{e}");
    let c = ConfigFile::parse(Path::new("t.toml"), "[store]\n").unwrap();
    assert!(!c.store.cluster);
}

#[test]
fn notify_webhooks_read_their_secret_files() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "s3cret\n").unwrap();
    let src = format!(
        "[notify]\nbacklog_threshold = 50\nmin_interval_s = 0\n\n[[notify.webhook]]\n\
         url = \"https://hooks.example.com/T/SECRET\"\nsecret_file = {key:?}\n\n\
         [[notify.webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\n\
         secret_file = {key:?}\nevents = [\"partner_held\", \"partner_held\", \"backlog_exceeded\"]\n"
    );
    let c = ConfigFile::parse(Path::new("t.toml"), &src).unwrap();
    let hooks: Vec<tollgate_notify::Webhook> = (c.notify.channels().into_iter())
        .filter_map(|c| match c {
            tollgate_notify::Channel::Webhook(w) => Some(w),
            tollgate_notify::Channel::Email(_) => None,
        })
        .collect();
    assert_eq!(hooks.len(), 2);
    assert_eq!((hooks[0].name.as_str(), hooks[1].name.as_str()), ("webhook-1", "ops"));
    assert_eq!(hooks[0].events, tollgate_notify::EventKind::WATCHED);
    use tollgate_notify::EventKind::{BacklogExceeded, PartnerHeld};
    assert_eq!(hooks[1].events, [PartnerHeld, BacklogExceeded]);
    // The trailing newline is not part of the key.
    assert_eq!(hooks[0].secret, tollgate_notify::Secret::new(b"s3cret").unwrap());
    assert!(!format!("{c:?}").contains("s3cret"), "the key is not in Debug");
    assert_eq!(c.notify.rules().backlog_threshold, 50);
    assert_eq!(c.notify.rules().min_interval, Duration::ZERO);
    let d = ConfigFile::parse(Path::new("t.toml"), "").unwrap().notify;
    assert_eq!(
        (d.rules().backlog_threshold, d.min_interval_s, d.timeout_ms),
        (10_000, 300, 10_000)
    );
}

#[test]
fn notify_errors_name_the_entry_and_hide_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let (key, empty) = (dir.path().join("key"), dir.path().join("empty"));
    std::fs::write(&key, "k").unwrap();
    std::fs::write(&empty, " \n").unwrap();
    let missing = dir.path().join("missing");
    let hook = |body: &str| format!("[[notify.webhook]]\nname = \"ops\"\n{body}\n");
    let url = "url = \"https://h.example/T/SECRET\"";
    let cases = [
        (
            hook(&format!("{url}\nsecret_file = {missing:?}")),
            format!("t.toml:4:15: [[notify.webhook]] #1 (name = \"ops\") secret_file = {missing:?}: cannot read: "),
        ),
        (
            hook(&format!("{url}\nsecret_file = {empty:?}")),
            format!("t.toml:4:15: [[notify.webhook]] #1 (name = \"ops\") secret_file = {empty:?}: empty;"),
        ),
        (
            hook(&format!("url = \"ftp://h.example/T/SECRET\"\nsecret_file = {key:?}")),
            "t.toml:3:7: [[notify.webhook]] #1 (name = \"ops\") url = (hidden): expected an http:// or https:// URL".into(),
        ),
        (
            hook(&format!("url = 5\nsecret_file = {key:?}")),
            "t.toml:3:7: [[notify.webhook]] #1 (name = \"ops\") url = (hidden): ".into(),
        ),
        (
            hook(&format!("{url}\nsecret_file = {key:?}\nevents = [\"partner_held\", \"held\"]")),
            "t.toml:5:10: [[notify.webhook]] #1 (name = \"ops\") events = \"held\": expected one of partner_held,".into(),
        ),
        (
            hook(&format!("{url}\nsecret_file = {key:?}\nevents = []")),
            "t.toml:5:10: [[notify.webhook]] #1 (name = \"ops\") events = []: name at least one".into(),
        ),
        (
            format!("{}{}", hook(&format!("{url}\nsecret_file = {key:?}")), hook(&format!("{url}\nsecret_file = {key:?}"))),
            "t.toml:6:8: [[notify.webhook]] #2 (name = \"ops\") name = \"ops\": already the name of [[notify.webhook]] #1".into(),
        ),
        (
            "[notify]\nmin_interval_s = 90000\n".into(),
            "t.toml:2:18: [notify] min_interval_s = 90000: must be between 0 and 86400".into(),
        ),
        (
            "[notify]\nbacklog_threshold = 0\n".into(),
            "t.toml:2:21: [notify] backlog_threshold = 0: must be at least 1".into(),
        ),
    ];
    for (src, want) in cases {
        let e = ConfigFile::parse(Path::new("t.toml"), &src).unwrap_err().to_string();
        assert!(e.starts_with(&want), "{src}\n got: {e}\nwant: {want}");
        assert!(!e.contains("SECRET"), "the URL is not shown: {e}");
    }
}

#[test]
fn notify_smtp_reads_its_password_and_checks_its_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let pass = dir.path().join("pass");
    std::fs::write(&pass, "pa55word\n").unwrap();
    let smtp = |rest: &str| {
        format!(
            "[notify.smtp]\nhost = \"mail.example.com\"\nfrom = \"Tollgate <tollgate@example.com>\"\n\
             to = [\"ops@example.com\", \"EDI team <edi@example.com>\"]\n{rest}"
        )
    };
    let src = smtp(&format!("username = \"tollgate\"\npassword_file = {pass:?}\n"));
    let c = ConfigFile::parse(Path::new("t.toml"), &src).unwrap();
    let channels = c.notify.channels();
    let [tollgate_notify::Channel::Email(mail)] = channels.as_slice() else {
        panic!("{channels:?}")
    };
    assert_eq!((mail.name.as_str(), mail.port), ("smtp", 587));
    assert_eq!(mail.security, tollgate_notify::Security::StartTls);
    assert_eq!(channels[0].target(), "smtp://mail.example.com:587");
    let login = mail.login.clone().unwrap();
    assert_eq!(
        (login.0.as_str(), login.1),
        ("tollgate", tollgate_notify::Secret::new(b"pa55word").unwrap())
    );
    assert_eq!(mail.to.len(), 2);
    assert!(!format!("{c:?}").contains("pa55word"), "the password is not in Debug");
    let c = ConfigFile::parse(Path::new("t.toml"), &smtp("security = \"tls\"\n")).unwrap();
    assert_eq!(c.notify.channels()[0].target(), "smtps://mail.example.com:465");

    let key = dir.path().join("key");
    std::fs::write(&key, "k").unwrap();
    let cases = [
        (
            smtp("username = \"tollgate\"\n"),
            "[notify.smtp] username = \"tollgate\": needs password_file",
        ),
        (smtp(&format!("password_file = {pass:?}\n")), "[notify.smtp] password_file = "),
        (
            smtp("security = \"ssl\"\n"),
            "[notify.smtp] security = \"ssl\": expected \"tls\", \"starttls\" or \"none\"",
        ),
        (smtp("port = 0\n"), "[notify.smtp] port = 0: must be between 1 and 65535"),
        (
            smtp("").replace("\"ops@example.com\"", "\"ops at example\""),
            "[notify.smtp] to = \"ops at example\": not an e-mail address",
        ),
        (
            format!(
                "{}\n[[notify.webhook]]\nname = \"smtp\"\nurl = \"http://h/\"\nsecret_file = {key:?}\n",
                smtp("")
            ),
            "[[notify.webhook]] #1 (name = \"smtp\") name = \"smtp\": already the name of [notify.smtp]",
        ),
    ];
    for (src, want) in cases {
        let e = ConfigFile::parse(Path::new("t.toml"), &src).unwrap_err().to_string();
        assert!(e.starts_with("t.toml:") && e.contains(want), "{src}\n got: {e}\nwant: {want}");
        assert!(!e.contains("pa55word"), "{e}");
    }
}
