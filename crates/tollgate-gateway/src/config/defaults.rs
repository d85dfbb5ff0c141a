//! The defaults of `[gateway]` keys; those kept with a position have an empty span (they are
//! not in the file).

use super::*;

/// `v` as a non-zero value; evaluated at compile time.
const fn nz64(v: u64) -> NonZeroU64 {
    match NonZeroU64::new(v) {
        Some(n) => n,
        None => panic!("a non-zero default is zero"),
    }
}
const fn nz32(v: u32) -> NonZeroU32 {
    match NonZeroU32::new(v) {
        Some(n) => n,
        None => panic!("a non-zero default is zero"),
    }
}
const fn nzusize(v: usize) -> NonZeroUsize {
    match NonZeroUsize::new(v) {
        Some(n) => n,
        None => panic!("a non-zero default is zero"),
    }
}

pub(super) fn poll_ms() -> NonZeroU64 {
    const { nz64(500) }
}
pub(super) fn settle_ms() -> u64 {
    200
}
pub(super) fn dedup_days() -> NonZeroU32 {
    const { nz32(30) }
}
pub(super) fn keep_days() -> NonZeroU32 {
    const { nz32(30) }
}
pub(super) fn max_upload_bytes() -> Spanned<NonZeroU32> {
    Spanned::new(0..0, const { nz32(52_428_800) })
}
pub(super) fn upload_budget_bytes() -> Spanned<u64> {
    Spanned::new(0..0, 268_435_456)
}
pub(super) fn upload_min_rate_bytes() -> NonZeroU64 {
    const { nz64(65_536) }
}
pub(super) fn upload_rate_grace_ms() -> NonZeroU64 {
    const { nz64(10_000) }
}
pub(super) fn max_file_bytes() -> NonZeroU64 {
    const { nz64(52_428_800) }
}
/// Temporary names of common transfer clients: dot files (OpenSSH sftp/rsync temp files,
/// editors), WinSCP `.filepart`, FileZilla/Cyberduck/curl `.part`, `.partial`, `.tmp`,
/// `.crdownload`, `.inprogress`, and `~` backups.
pub(super) const PARTIAL_NAMES: [&str; 8] =
    [".*", "*.filepart", "*.part", "*.partial", "*.tmp", "*.crdownload", "*.inprogress", "*~"];
/// Compiled once per process: building a glob set costs far more than reading a config.
pub(super) fn partial_names() -> PartialNames {
    static COMPILED: std::sync::OnceLock<PartialNames> = std::sync::OnceLock::new();
    COMPILED
        .get_or_init(|| {
            PartialNames::new(&PARTIAL_NAMES.map(str::to_owned))
                .unwrap_or_else(|_| unreachable!("the default partial names are valid globs"))
        })
        .clone()
}
pub(super) fn incomplete_grace_ms() -> u64 {
    300_000
}
pub(super) fn mode() -> Spanned<QuotaMode> {
    Spanned::new(0..0, QuotaMode::default())
}
pub(super) fn timeout_ms() -> NonZeroU64 {
    const { nz64(200) }
}
pub(super) fn metering_id() -> Spanned<MeteringTemplate> {
    Spanned::new(0..0, MeteringTemplate::default_template())
}
pub(super) fn interval() -> Spanned<NonZeroU32> {
    Spanned::new(0..0, const { nz32(1) })
}
pub(super) fn min_weight() -> u64 {
    1
}
pub(super) fn max_concurrency() -> NonZeroUsize {
    const { nzusize(4) }
}
