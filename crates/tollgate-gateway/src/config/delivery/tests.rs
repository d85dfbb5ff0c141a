//! `[gateway.route.delivery]` read and resolved: secrets from files, refusals naming the route
//! and the key, and no secret in errors or `Debug`.

use std::path::Path;

use super::*;

/// A route to `deliver` with `delivery` keys (a `[route.delivery]` table, or nothing).
fn route(deliver: &str, delivery: &str) -> String {
    format!(
        "[[route]]\nname = \"Orders\"\ndocuments = [\"850\"]\nlimit = 10\nunit = \"day\"\n\
         deliver = \"{deliver}\"\n{delivery}"
    )
}

/// The error for `src` as `tollgate serve` prints it: located, with the route named.
fn refused(src: &str) -> String {
    let e = match toml::from_str::<GatewayConfig>(src) {
        Ok(c) => c.plan().map(|_| ()).unwrap_err(),
        Err(e) => ConfigError::from_toml(&e),
    };
    e.in_context(src).locate(Path::new("t.toml"), src).to_string()
}

fn plan(src: &str) -> Plan {
    toml::from_str::<GatewayConfig>(src).unwrap().plan().unwrap()
}

fn file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

#[test]
fn a_route_without_a_delivery_table_sends_the_x12_type_and_nothing_else() {
    let p = plan(&route("https://erp.example/in", ""));
    let d = &p.routes[0].delivery;
    assert_eq!(d.content_type, "application/edi-x12");
    assert!(d.headers.is_empty() && d.auth.is_none() && d.identity.is_none());
}

#[test]
fn secrets_are_read_from_files_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let secret = file(dir.path(), "secret", "cl13nt-s3cret\n");
    let src = route(
        "https://cpi.example/http/orders",
        &format!(
            "[route.delivery]\noauth2 = {{ token_url = \"https://auth.example/oauth/token\", \
             client_id = \"sb-1!b2|it\", client_secret_file = {secret:?}, scope = \"a b\" }}\n\
             headers = {{ \"X-Api-Key\" = \"h3ader-value\", \"SAP-Client\" = \"100\" }}\n\
             content_type = \"application/EDIFACT\"\n"
        ),
    );
    let p = plan(&src);
    let d = &p.routes[0].delivery;
    let Some(Auth::OAuth2(o)) = &d.auth else { panic!("{d:?}") };
    assert_eq!(o.client_secret.expose(), "cl13nt-s3cret", "one trailing newline dropped");
    assert_eq!((o.client_id.as_str(), o.scope.as_deref()), ("sb-1!b2|it", Some("a b")));
    assert_eq!(d.content_type, "application/EDIFACT");
    assert_eq!(d.headers["x-api-key"], "h3ader-value");
    assert!(d.headers["x-api-key"].is_sensitive());
    let shown = format!("{p:?} {:?}", toml::from_str::<GatewayConfig>(&src).unwrap());
    assert!(!shown.contains("cl13nt-s3cret") && !shown.contains("h3ader-value"), "{shown}");

    let password = file(dir.path(), "password", "pa55word\r\n");
    let src = route(
        "http://erp.example/in",
        &format!("[route.delivery]\nbasic = {{ user = \"edi\", password_file = {password:?} }}\n"),
    );
    let Some(Auth::Basic { user, password }) = &plan(&src).routes[0].delivery.auth else {
        panic!()
    };
    assert_eq!((user.as_str(), password.expose()), ("edi", "pa55word"));
}

#[test]
fn a_missing_or_empty_secret_file_names_the_route_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let empty = file(dir.path(), "empty", "\n");
    for (path, why) in [("/no/such/secret".to_owned(), "cannot read"), (empty, "the file is empty")]
    {
        let src = route(
            "http://erp.example/in",
            &format!("[route.delivery]\nbasic = {{ user = \"edi\", password_file = {path:?} }}\n"),
        );
        let e = refused(&src);
        assert!(e.starts_with("t.toml:8:41: [[route]] #1 (name = \"Orders\") "), "{e}");
        assert!(e.contains(") gateway.route[0].delivery.basic.password_file = "), "{e}");
        assert!(e.contains(why), "{e}");
    }
    let src = route(
        "http://erp.example/in",
        "[route.delivery]\noauth2 = { token_url = \"https://a.example/t\", client_id = \"c\", \
         client_secret_file = \"/no/such/secret\" }\n",
    );
    let e = refused(&src);
    assert!(e.contains("(name = \"Orders\") gateway.route[0].delivery.oauth2.client_secret_file = \"/no/such/secret\": cannot read"), "{e}");
}

#[test]
fn a_password_in_the_deliver_url_is_refused_and_hidden() {
    let e = refused(&route("https://edi:pw-Zq81@erp.example/in", ""));
    assert!(e.starts_with("t.toml:6:11: [[route]] #1 (name = \"Orders\") deliver = "), "{e}");
    assert!(e.contains("https://edi:(hidden)@erp.example/in") && e.contains("basic"), "{e}");
    assert!(!e.contains("pw-Zq81"), "{e}");
    let e = refused(&route("http://edi@erp.example/in", ""));
    assert!(e.contains("a user or password in the URL is refused"), "{e}");
    let e = refused(&route(
        "http://erp.example/in",
        "[route.delivery]\noauth2 = { token_url = \"https://c:s3@a.example/t\", client_id = \"c\", \
         client_secret_file = \"/x\" }\n",
    ));
    assert!(e.contains("oauth2.token_url") && !e.contains("s3@"), "{e}");
}

#[test]
fn conflicting_or_incomplete_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = file(dir.path(), "secret", "s");
    let both = format!(
        "[route.delivery]\nbasic = {{ user = \"u\", password_file = {secret:?} }}\n\
         oauth2 = {{ token_url = \"https://a.example/t\", client_id = \"c\", \
         client_secret_file = {secret:?} }}\n"
    );
    let cases = [
        (
            "dir:./out",
            "[route.delivery]\ncontent_type = \"text/plain\"\n".to_owned(),
            "a dir: target takes no delivery settings",
        ),
        ("http://e/in", both, "set oauth2 or basic, not both"),
        (
            "http://e/in",
            format!(
                "[route.delivery]\nbasic = {{ user = \"u\", password_file = {secret:?} }}\n\
                 headers = {{ Authorization = \"Bearer h1dden\" }}\n"
            ),
            "Authorization is sent by oauth2 or basic",
        ),
        (
            "http://e/in",
            "[route.delivery]\nclient_cert = \"/c.pem\"\n".into(),
            "needs client_key too",
        ),
        (
            "http://e/in",
            "[route.delivery]\nheaders = { \"Content-Type\" = \"h1dden\" }\n".into(),
            "set content_type instead",
        ),
        (
            "http://e/in",
            "[route.delivery]\nheaders = { \"Tollgate-Partner\" = \"h1dden\" }\n".into(),
            "the gateway sets",
        ),
        (
            "http://e/in",
            "[route.delivery]\nheaders = { \"Bad Name\" = \"h1dden\" }\n".into(),
            "not a header name",
        ),
        (
            "http://e/in",
            "[route.delivery]\nheaders = { \"X-Key\" = \"h1dden\\n\" }\n".into(),
            "non-empty visible ASCII",
        ),
        (
            "http://e/in",
            "[route.delivery]\nheaders = { \"X-Key\" = \"h1dden…\" }\n".into(),
            "non-empty visible ASCII",
        ),
        (
            "http://e/in",
            "[route.delivery]\nheaders = { \"x-k\" = \"h1dden\", \"X-K\" = \"h1dden\" }\n".into(),
            "given twice",
        ),
        (
            "http://e/in",
            "[route.delivery]\ncontent_type = \"edi\"\n".into(),
            "content_type = \"edi\": expected a media type",
        ),
        (
            "http://e/in",
            "[route.delivery]\nbasic = { user = \"a:b\", password_file = \"/x\" }\n".into(),
            "basic.user = \"a:b\"",
        ),
        ("http://e/in", "[route.delivery]\nbearer = \"x\"\n".into(), "unknown field `bearer`"),
    ];
    for (deliver, delivery, needle) in cases {
        let e = refused(&route(deliver, &delivery));
        assert!(e.contains("[[route]] #1 (name = \"Orders\")"), "{delivery}: {e}");
        assert!(e.contains(needle), "{delivery}: {e}");
        assert!(!e.contains("h1dden"), "{delivery}: {e}");
    }
}

#[test]
fn a_client_certificate_is_read_with_its_key_and_checked_against_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = tollgate_testkit::tls::TestCa::new("Client CA");
    let (cert, key) = ca.client("gateway").write(dir.path(), "gw");
    let (_, other_key) = ca.client("other").write(dir.path(), "other");
    let with = |cert: &Path, key: &Path| {
        route(
            "https://erp.example/in",
            &format!("[route.delivery]\nclient_cert = {cert:?}\nclient_key = {key:?}\n"),
        )
    };
    assert!(plan(&with(&cert, &key)).routes[0].delivery.identity.is_some());
    let e = refused(&with(&cert, &other_key));
    assert!(
        e.contains("gateway.route[0].delivery.client_key = ") && e.contains("cannot be used with"),
        "{e}"
    );
    let e = refused(&with(&key, &key));
    assert!(e.contains("delivery.client_cert = ") && e.contains("no CERTIFICATE block"), "{e}");
    let e = refused(&with(&cert, &cert));
    assert!(
        e.contains("delivery.client_key = ") && e.contains("no unencrypted PRIVATE KEY"),
        "{e}"
    );
}

#[test]
fn pem_blocks_keeps_only_the_labels_asked_for() {
    let pem = b"-----BEGIN EC PARAMETERS-----\nBggq\n-----END EC PARAMETERS-----\n\
                -----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n";
    assert_eq!(
        pem_blocks(pem, &["EC PRIVATE KEY"]),
        "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n"
    );
}
