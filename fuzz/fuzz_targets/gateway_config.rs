//! Fuzz target: arbitrary text as the body of a `[gateway]` section, deserialized into
//! `tollgate_gateway::GatewayConfig` and, when that succeeds, validated by `plan()`.
//!
//! Neither step may panic or hang. A plan that is built must hold what its docs promise: every
//! route's spec has 1 ≤ interval ≤ the unit's longest window and the limit that was written,
//! at least one deliverer, a visible-ASCII name, a metering-id template whose `{route}` is
//! filled in, and each of its documents routed to it alone; the intake limits are in their
//! bounds; remote metering has a URL and a non-zero timeout.
#![no_main]
#![forbid(unsafe_code)]

use tollgate_gateway::config::Target;
use tollgate_gateway::{GatewayConfig, QuotaMode};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = toml::from_str::<GatewayConfig>(text) else { return };
    let plan = match config.plan() {
        Ok(plan) => plan,
        Err(e) => {
            assert!(e.key.starts_with("gateway."), "the error names a key: {e}");
            return;
        }
    };

    assert!(plan.poll.as_millis() >= 1);
    assert!(plan.dedup.as_secs() >= 86_400);
    assert!(plan.max_upload_bytes >= 1 && plan.max_upload_bytes <= u64::from(u32::MAX));
    assert!(plan.upload_budget_bytes >= plan.max_upload_bytes);
    assert!(plan.max_file_bytes >= 1);
    match (config.quota.mode, &plan.remote) {
        (QuotaMode::Embedded, None) => {}
        (QuotaMode::Remote, Some(remote)) => {
            assert!(!remote.timeout.is_zero());
            // As written (`http:host/`, `HTTP://host`, ` http://host` all pass): what must
            // hold is that it parses as an http(s) URL with a host.
            assert_eq!(Some(&remote.url), config.quota.url.as_ref());
            let url = url::Url::parse(&remote.url).expect("the remote URL parses");
            assert!(matches!(url.scheme(), "http" | "https") && url.host().is_some(), "{url}");
        }
        (mode, remote) => panic!("quota mode {mode:?} with remote {remote:?}"),
    }

    assert_eq!(plan.routes.len(), config.route.len());
    let mut documents = 0;
    for (i, (route, written)) in plan.routes.iter().zip(&config.route).enumerate() {
        let spec = route.spec;
        assert!(spec.interval >= 1, "route {i}: interval 0");
        assert!(spec.interval <= spec.unit.max_interval(), "route {i}: {spec:?}");
        assert_eq!(spec.limit, written.limit, "route {i}: the limit that was written");
        assert!(spec.validated().is_ok(), "route {i}: {spec:?}");
        assert!(route.max_concurrency >= 1, "route {i}: no deliverer");
        assert!(!route.name.is_empty() && route.name.bytes().all(|b| b.is_ascii_graphic()));
        assert!(!route.template.contains("{route}"), "route {i}: {}", route.template);
        match &route.target {
            Target::Dir(path) => assert!(!path.as_os_str().is_empty()),
            Target::Http(url) => assert!(url.starts_with("http://") || url.starts_with("https://")),
        }
        // Any partner (a name or the raw id of an unknown sender) gets a metering id.
        for partner in ["P", "ZZ:ACME CO", "\u{e9}\t", ""] {
            let id = route.metering_id(partner);
            assert!(!id.as_str().is_empty() && id.as_str().len() <= 256);
        }
        assert!(!written.documents.is_empty(), "route {i}: no documents");
        for d in &written.documents {
            assert_eq!(plan.by_document.get(d), Some(&i), "route {i}: document {d:?}");
            assert!(std::ptr::eq(plan.route_for(d).expect("routed"), route));
        }
        documents += written.documents.len();
    }
    assert_eq!(plan.by_document.len(), documents, "one route per document");

    for (i, p) in config.partner.iter().enumerate() {
        for id in &p.ids {
            let (qual, rest) = id.split_once(':').expect("partner ids are QUAL:ID");
            let normal = format!("{}:{}", qual.trim(), rest.trim());
            assert_eq!(plan.partner_name(&normal), p.name, "partner {i}: id {id:?}");
        }
    }
});
