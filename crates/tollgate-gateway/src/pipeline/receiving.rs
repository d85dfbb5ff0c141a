//! Receiving: turning queued files into items (the one parse unless intake did it, dedup,
//! route) and metering the routed ones. A parser panic rejects only its file.

use std::panic::AssertUnwindSafe;

use super::*;

impl Pipeline {
    /// Splits received files into items: parse (unless intake did), dedup, route; then meters
    /// the routed ones. A file the parser fails on (a panic: never expected) becomes one
    /// rejected item with the reason, and the other files of the batch go on.
    pub(super) async fn take_files(&mut self, files: Vec<FileRecord>, batch: &mut Batch) {
        let parts = self.parts.clone();
        // Without their parses, for the case the whole task is lost.
        let records: Vec<FileRecord> =
            files.iter().map(|f| FileRecord { parsed: None, ..f.clone() }).collect();
        let parse = move || {
            let mut seen = HashSet::new();
            let mut out = Vec::with_capacity(files.len());
            for f in files {
                let record = FileRecord { parsed: None, ..f.clone() };
                let run = std::panic::catch_unwind(AssertUnwindSafe(|| prepare(&parts, f, &seen)));
                match run {
                    Ok(prepared) => {
                        seen.extend(prepared.2.iter().map(|(key, _)| key.clone()));
                        out.push(prepared);
                    }
                    Err(panic) => {
                        let why = panic_message(panic.as_ref());
                        tracing::error!(file = %record.id, origin = %record.origin, error = %why, "the parser failed on a file; it is rejected");
                        out.push(parser_failed(record, &why));
                    }
                }
            }
            out
        };
        // An ephemeral (simulated) gateway parses inline: see `crate::blocking`.
        let task = if self.parts.spool.is_ephemeral() {
            Ok(parse())
        } else {
            tokio::task::spawn_blocking(parse).await
        };
        let prepared = match task {
            Ok(prepared) => prepared,
            // The runtime is shutting down: the files stay queued (and in the spool's `files`
            // table, so they are parsed after the next start).
            Err(e) if e.is_cancelled() => {
                for r in records {
                    self.intake.push(r);
                }
                return;
            }
            Err(e) => {
                let why = e.to_string();
                let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
                tracing::error!(files = ?ids, error = %why, "the parse task failed; its files are rejected");
                records.into_iter().map(|r| parser_failed(r, &why)).collect()
            }
        };
        for (file, items, dedup) in prepared {
            batch.change.remove_files.push(file.id.clone());
            batch.change.dedup.extend(dedup);
            // The items now hold the spool file; the queued record lets go of it below.
            for item in &items {
                self.hold_file(&item.spool_file, &item.id);
            }
            self.release_file(&file.spool, &queued_holder(&file.id), batch);
            for item in items {
                telemetry::count(Counter::Received, &item, &self.parts.plan);
                match item.state {
                    State::Rejected => telemetry::count(Counter::Rejected, &item, &self.parts.plan),
                    State::Duplicate => {
                        telemetry::count(Counter::Duplicate, &item, &self.parts.plan);
                        self.parts.meter.duplicate(&item);
                    }
                    _ => {}
                }
                batch.put(&item);
                if item.state == State::Received {
                    let id = item.id.clone();
                    self.live.insert(id.clone(), Box::new(item));
                    self.meter_new(&id, batch).await;
                }
            }
        }
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
