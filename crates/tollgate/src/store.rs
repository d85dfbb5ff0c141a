//! The counter store of `tollgate serve`: memory, the embedded redb file in the data
//! directory, or Redis (one server or a cluster), chosen by `--store` or `[store]`.

use std::path::Path;

use anyhow::Context;
use tollgate_quota::AnyStore;
use tollgate_quota::store::{
    EmbeddedOptions, EmbeddedStore, MemoryStore, OnCorrupt, RedisOptions, RedisStore,
};

use crate::config::{StoreKind, StoreSection, embedded_file};

/// Opens the counter store `kind` names: the embedded one in `data` (created when missing),
/// or Redis with `section`'s options. An unreachable Redis is not an error here; it is
/// handled per request as `section.store_unavailable` says.
pub async fn open(
    kind: &StoreKind,
    data: &Path,
    section: &StoreSection,
    on_corrupt: OnCorrupt,
) -> anyhow::Result<AnyStore> {
    match kind {
        StoreKind::Memory => Ok(AnyStore::Memory(MemoryStore::new())),
        StoreKind::Embedded => {
            std::fs::create_dir_all(data)
                .with_context(|| format!("cannot create the data directory {}", data.display()))?;
            let path = embedded_file(data);
            let opts = EmbeddedOptions {
                path: path.clone(),
                flush_interval: section.flush_interval,
                durability: section.durability,
                on_corrupt,
            };
            let store = EmbeddedStore::open(opts)
                .with_context(|| format!("cannot open the embedded store {}", path.display()))?;
            Ok(AnyStore::Embedded(store))
        }
        StoreKind::Redis(url) => {
            let mut opts = RedisOptions::new(url.as_str());
            if let Some(prefix) = &section.key_prefix {
                opts.key_prefix = prefix.clone();
            }
            if let Some(timeout) = section.timeout {
                opts.timeout = timeout;
            }
            opts.on_unavailable = section.store_unavailable;
            opts.ca_file = section.ca_file.clone();
            opts.cluster = section.cluster;
            opts.local_share_of = section.local_share_of;
            // Fails only for a malformed URL or `ca_file`, both config mistakes; an unreachable
            // Redis is handled per request.
            let store = RedisStore::connect(opts).await.map_err(|e| {
                // The URL's password stays out of the error.
                let url = crate::config::redact_url(url.as_str());
                crate::config::ConfigMistake(format!("cannot use the redis store {url}: {e}"))
            })?;
            Ok(AnyStore::Redis(store))
        }
    }
}
