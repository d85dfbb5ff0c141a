//! The console's pages and assets, embedded in the binary: one layout (head, navigation,
//! status line) around each page's static body, plus one script and one style sheet. Pages
//! hold no data and no secret; the script fills them from the API, as text only.
//!
//! The navigation is left out of the login page, and is hidden on the others until the
//! script knows the session. An unknown path under `/ui/` gets the "page not found" page
//! (status 404) with a link to the overview.

use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

const LAYOUT: &str = include_str!("../assets/layout.html");
const NAV: &str = include_str!("../assets/nav.html");
/// The login page's header: the name alone, no link anywhere.
const NO_NAV: &str = "  <span class=\"brand\">Tollgate</span>";
/// One script, from one file per concept: the shared helpers, start and login; then one file per
/// page, the charts, reasons in plain words and policy diffs.
const SCRIPT: &str = concat!(
    include_str!("../assets/console.js"),
    include_str!("../assets/charts.js"),
    include_str!("../assets/overview.js"),
    include_str!("../assets/partner.js"),
    include_str!("../assets/queue.js"),
    include_str!("../assets/health.js"),
    include_str!("../assets/limits.js"),
    include_str!("../assets/audit.js"),
    include_str!("../assets/reasons.js"),
    include_str!("../assets/policy_diff.js"),
);
const STYLE: &str = include_str!("../assets/console.css");

/// A page: its `data-page` name, title and body.
struct Page {
    name: &'static str,
    title: &'static str,
    body: &'static str,
}

const OVERVIEW: Page =
    Page { name: "overview", title: "Overview", body: include_str!("../assets/overview.html") };
const PARTNER: Page =
    Page { name: "partner", title: "Partner", body: include_str!("../assets/partner.html") };
const QUEUE: Page =
    Page { name: "queue", title: "Queue", body: include_str!("../assets/queue.html") };
const LIMITS: Page =
    Page { name: "limits", title: "Limits", body: include_str!("../assets/limits.html") };
const HEALTH: Page =
    Page { name: "health", title: "Health", body: include_str!("../assets/health.html") };
const AUDIT: Page =
    Page { name: "audit", title: "Audit log", body: include_str!("../assets/audit.html") };
const LOGIN: Page =
    Page { name: "login", title: "Log in", body: include_str!("../assets/login.html") };
const NOT_FOUND: Page = Page {
    name: "notfound",
    title: "Page not found",
    body: include_str!("../assets/notfound.html"),
};

/// Every page, for the checks of their weight and markup.
const ALL: [&Page; 8] = [&OVERVIEW, &PARTNER, &QUEUE, &LIMITS, &HEALTH, &AUDIT, &LOGIN, &NOT_FOUND];

/// The HTML of `page`: the layout with its name, title and body in place.
fn render(page: &Page) -> String {
    let nav = if page.name == LOGIN.name { NO_NAV } else { NAV.trim_end() };
    LAYOUT
        .replace("{{nav}}", nav)
        .replace("{{page}}", page.name)
        .replace("{{title}}", page.title)
        .replace("{{body}}", page.body)
}

fn html(page: &Page) -> Response {
    ([(CONTENT_TYPE, "text/html; charset=utf-8")], render(page)).into_response()
}

/// `GET /ui/`.
pub(crate) async fn overview() -> Response {
    html(&OVERVIEW)
}
/// `GET /ui/partner?name=…`.
pub(crate) async fn partner() -> Response {
    html(&PARTNER)
}
/// `GET /ui/queue`.
pub(crate) async fn queue() -> Response {
    html(&QUEUE)
}
/// `GET /ui/limits`.
pub(crate) async fn limits() -> Response {
    html(&LIMITS)
}
/// `GET /ui/health`.
pub(crate) async fn health() -> Response {
    html(&HEALTH)
}
/// `GET /ui/audit`.
pub(crate) async fn audit() -> Response {
    html(&AUDIT)
}
/// `GET /ui/login`.
pub(crate) async fn login() -> Response {
    html(&LOGIN)
}
/// Any other path under `/ui/` (but `/ui/api/`): the "page not found" page, status 404.
pub(crate) async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, html(&NOT_FOUND)).into_response()
}

/// `GET /ui/assets/console.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}
/// `GET /ui/assets/console.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "no-cache")], body).into_response()
}

/// The weight of every page with its assets, in bytes (the largest page first), for the
/// record of what a page costs to load.
pub fn page_weights() -> Vec<(&'static str, usize)> {
    let mut w: Vec<(&'static str, usize)> =
        ALL.iter().map(|p| (p.name, render(p).len() + SCRIPT.len() + STYLE.len())).collect();
    w.sort_by_key(|p| std::cmp::Reverse(p.1));
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Submitted before its script takes over (Enter pressed early, a password manager, the
    /// script not loaded), the login form must not put the token into a URL: a GET would.
    #[test]
    fn the_login_form_posts() {
        let form = LOGIN.body.lines().next().unwrap_or_default();
        assert!(form.contains(r#"method="post""#), "{form}");
    }

    #[test]
    fn every_page_is_complete_and_small() {
        for (name, weight) in page_weights() {
            assert!(weight <= 200 * 1024, "{name}: {weight} bytes");
        }
        for p in ALL {
            let html = render(p);
            assert!(!html.contains("{{"), "{}: a placeholder is left", p.name);
            assert!(html.contains(&format!("data-page=\"{}\"", p.name)));
        }
    }

    #[test]
    fn no_inline_script_or_markup_from_data() {
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("outerHTML"));
        assert!(!SCRIPT.contains("insertAdjacentHTML") && !SCRIPT.contains("document.write"));
        assert!(!SCRIPT.contains("eval("));
        for p in ALL {
            let html = render(p);
            assert_eq!(html.matches("<script").count(), 1, "{}", p.name);
            assert!(html.contains("<script src=\"/ui/assets/console.js\" defer></script>"));
            assert!(!html.contains(" on") || !html.contains("onclick"), "{}", p.name);
            assert!(!html.contains("style="), "{}: inline style", p.name);
        }
    }

    #[test]
    fn the_login_page_has_no_navigation_and_the_others_hide_it_until_the_session_is_known() {
        let login = render(&LOGIN);
        assert!(!login.contains("<nav") && !login.contains("data-nav"), "{login}");
        assert_eq!(login.matches("<a ").count(), 1, "only the skip link: {login}");
        for p in ALL.iter().filter(|p| p.name != LOGIN.name) {
            let html = render(p);
            assert!(
                html.contains("<nav id=\"nav\" aria-label=\"Console pages\" hidden>"),
                "{}",
                p.name
            );
            assert!(html.contains("<div class=\"who\" id=\"who-box\" hidden>"), "{}", p.name);
        }
    }
}
