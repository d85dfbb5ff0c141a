//! A small real file system that tests can fill up: a tmpfs mounted on a temp dir.
//!
//! Mounting needs root (CAP_SYS_ADMIN). Without it [`SmallDisk::mount`] says so loudly and
//! returns `None`, or fails the test when `CI` is set, so CI never skips a disk-full test.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a fixed size mounted on a temp dir; unmounted (lazily) when dropped.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` (e.g. `"4m"`), or `None` after a loud skip message.
    pub fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            return Some(SmallDisk { dir });
        }
        let msg =
            "*** SKIPPED: cannot mount a tmpfs (needs root); this disk-full test did not run ***";
        assert!(std::env::var_os("CI").is_none(), "{msg} (CI is set: failing)");
        eprintln!("\n{msg}\n");
        None
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a filler file until the disk is full (to the last 512 bytes); returns its path.
    /// Removing it frees the space again.
    pub fn fill(&self) -> PathBuf {
        let filler = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        for chunk in [64 * 1024, 512] {
            let bytes = vec![0xAB; chunk];
            while f.write_all(&bytes).and_then(|()| f.sync_all()).is_ok() {}
        }
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
