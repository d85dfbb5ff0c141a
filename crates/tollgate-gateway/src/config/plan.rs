//! The validated gateway: the typed [`Plan`] that [`GatewayConfig::plan`](super::GatewayConfig::plan)
//! builds from the file's typed keys, with its routes, weight rules, delivery targets and
//! remote quota settings. Nothing here is read from text again (a [`Target`] is parsed once,
//! when its `deliver` key is read).

use super::*;

/// Where a route delivers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// An outbound directory: temp file, fsync, rename.
    Dir(PathBuf),
    /// An HTTP endpoint that receives the raw interchange in a POST.
    Http(HttpUrl),
}

impl std::str::FromStr for Target {
    type Err = String;
    /// `dir:PATH` or an `http://` / `https://` URL.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("dir:") {
            if path.is_empty() {
                return Err("dir: needs a path, e.g. dir:./outbound/214".to_owned());
            }
            return Ok(Target::Dir(PathBuf::from(path)));
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            let url: HttpUrl = s.parse()?;
            if value::has_userinfo(&url) {
                return Err("a user or password in the URL is refused (it would sit in the \
                            config in clear and reach logs): set [gateway.route.delivery] \
                            basic = { user, password_file } instead"
                    .to_owned());
            }
            return Ok(Target::Http(url));
        }
        Err("expected \"dir:PATH\" or an http:// or https:// URL".to_owned())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(p) => write!(f, "dir:{}", p.display()),
            Self::Http(u) => f.write_str(u.as_str()),
        }
    }
}

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    /// The route's name.
    pub name: String,
    /// The metering id template (`{route}` already substituted; `{partner}` left).
    pub template: String,
    /// The quota each metering id of this route gets.
    pub spec: QuotaSpec,
    /// How interchanges are weighed: what one unit of quota is.
    pub weight: RecordRule,
    /// The least one interchange consumes (its weight is raised to this).
    pub min_weight: u64,
    /// Admit what fits and hold the rest.
    pub split: bool,
    /// Give back the units of an admitted interchange that is purged or dies undelivered.
    pub refund_unsent: bool,
    /// Where interchanges go.
    pub target: Target,
    /// Deliveries in flight to the target at most.
    pub max_concurrency: usize,
    /// What counts as a duplicate.
    pub dedup: Dedup,
    /// How long an interchange key or transaction fingerprint is remembered.
    pub dedup_window: Duration,
    /// How its HTTP target is called: credentials, client certificate, headers, Content-Type.
    pub delivery: Arc<Delivery>,
}

impl Route {
    /// How the parse weighs this route's interchanges, and what it keeps of them.
    pub fn weighing(&self) -> crate::envelope::Weighing {
        crate::envelope::weighing(self.weight, self.split, self.dedup == Dedup::Transaction)
    }

    /// The metering id for `partner` (a partner name, or the raw `QUAL:ID` of an unknown sender).
    ///
    /// Bytes outside visible ASCII (spaces in a raw id) become `_`, so the result is always a
    /// valid [`MeteringId`] once the template was (checked in [`GatewayConfig::plan`]); the
    /// fallback is only reached for an id longer than 256 bytes, which is cut.
    pub fn metering_id(&self, partner: &str) -> MeteringId {
        let clean: String =
            partner.chars().map(|c| if c.is_ascii_graphic() { c } else { '_' }).collect();
        let full = self.template.replace("{partner}", &clean);
        MeteringId::new(&full).unwrap_or_else(|_| {
            let cut: String = full.chars().take(MeteringId::MAX_LEN).collect();
            MeteringId::new(&cut).unwrap_or_else(|_| {
                MeteringId::new("_")
                    .unwrap_or_else(|_| unreachable!("\"_\" is a valid metering id"))
            })
        })
    }
}

/// Remote metering settings.
#[derive(Debug, Clone)]
pub struct RemoteQuota {
    /// The quota endpoint.
    pub url: HttpUrl,
    /// Per-check timeout.
    pub timeout: Duration,
    /// The `x-api-key` header value, marked sensitive (never logged).
    pub api_key: Option<ApiKey>,
    /// `ca_file`: the only CAs trusted for the service's certificate (system roots if none).
    pub ca_file: Option<PathBuf>,
}

/// The validated gateway configuration.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Landing directories.
    pub inbound: Vec<PathBuf>,
    /// Scan period.
    pub poll: Duration,
    /// How long a file must stay unchanged.
    pub settle: Duration,
    /// Dedup horizon of routes without their own (`dedup_days`).
    pub dedup: Duration,
    /// How long rejected, duplicate and dead items are kept (`keep_days`).
    pub keep: Duration,
    /// Acknowledgement directory.
    pub acks: Option<PathBuf>,
    /// Upload limit in bytes.
    pub max_upload_bytes: u64,
    /// Upload bytes held in memory at once, across all uploads.
    pub upload_budget_bytes: u64,
    /// The slowest an upload may arrive, in bytes per second, after `upload_rate_grace`.
    pub upload_min_rate: u64,
    /// How long an upload may take before `upload_min_rate` applies.
    pub upload_rate_grace: Duration,
    /// Landing file limit in bytes.
    pub max_file_bytes: u64,
    /// Names of landing files still being written.
    pub partial_names: crate::landing::PartialNames,
    /// How long an unchanged file with an unfinished last interchange waits.
    pub incomplete_grace: Duration,
    /// `None` for embedded metering.
    pub remote: Option<RemoteQuota>,
    /// `deliver_ca_file`: the only CAs trusted for HTTPS delivery targets (system roots if
    /// none).
    pub deliver_ca_file: Option<PathBuf>,
    /// Fail-open or hold while the remote quota service is down.
    pub on_unavailable: OnQuotaUnavailable,
    /// `QUAL:ID` → partner name.
    pub partners: HashMap<String, String>,
    /// Landing directories bound to one partner (`[[gateway.partner]] inbound`), to its name.
    pub landing_owners: HashMap<PathBuf, String>,
    /// What becomes of an interchange whose sender is not in `partners`.
    pub unknown_senders: super::UnknownSenders,
    /// Routes in config order.
    pub routes: Vec<Route>,
    /// Document type → index into `routes`.
    pub by_document: HashMap<String, usize>,
}

impl Plan {
    /// The route for a document type, if any.
    pub fn route_for(&self, document: &str) -> Option<&Route> {
        self.by_document.get(document).map(|&i| &self.routes[i])
    }

    /// The longest dedup window of the gateway and its routes: what the spool's dedup keys
    /// must be kept for.
    pub fn longest_dedup(&self) -> Duration {
        self.routes.iter().map(|r| r.dedup_window).fold(self.dedup, Duration::max)
    }

    /// The partner whose landing directory a landing file (its full path, a record's
    /// `origin`) was taken from, when that directory is bound to one.
    pub fn landing_owner(&self, origin: &str) -> Option<&str> {
        let dir = std::path::Path::new(origin).parent()?;
        self.landing_owners.get(dir).map(String::as_str)
    }

    /// The partner name for a sender `QUAL:ID`, or the raw id for an unknown sender.
    pub fn partner_name(&self, sender: &str) -> String {
        self.partners.get(sender).cloned().unwrap_or_else(|| sender.to_owned())
    }
}
