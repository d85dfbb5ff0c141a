//! A real OpenSSH `sshd` serving SFTP on a free loopback port, as the current user, with its
//! host key, client key and config in a temp dir; the `sftp` client to upload through it.
//!
//! The server's SFTP subsystem (`internal-sftp -d DIR`) starts every session in the upload
//! directory the test gives, so relative names in a batch land there. Without `sshd`, `sftp`
//! or `ssh-keygen` the tests say so loudly and return, unless `CI` is set, where they fail.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where Debian puts the server (often not on a user's `PATH`).
const SBIN: &str = "/usr/sbin";

/// A running `sshd -D -e`; killed when dropped.
pub struct SftpServer {
    /// The loopback port it listens on.
    pub port: u16,
    dir: tempfile::TempDir,
    child: Child,
    log: Arc<Mutex<String>>,
}

/// `name` on `PATH`, or in `/usr/sbin`.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from(SBIN)])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl SftpServer {
    /// Starts a server whose SFTP sessions begin in `upload_dir`; `None` after a loud notice
    /// when OpenSSH is not installed (a failure when `CI` is set).
    pub fn start(upload_dir: &Path) -> Option<SftpServer> {
        let tools: Vec<Option<PathBuf>> =
            ["sshd", "sftp", "ssh-keygen"].into_iter().map(find).collect();
        let [Some(sshd), Some(_), Some(keygen)] = tools.as_slice() else {
            let msg = "the SFTP tests need OpenSSH's sshd, sftp and ssh-keygen (apt-get install \
                       openssh-server openssh-client)";
            if std::env::var_os("CI").is_some() {
                panic!("{msg}");
            }
            eprintln!("\n!!!!!!!! NOTICE: {msg}; NOT RUN !!!!!!!!\n");
            return None;
        };
        privsep_dir();
        let dir = tempfile::tempdir().unwrap();
        for key in ["host_key", "client_key"] {
            let out = Command::new(keygen)
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "tollgate-test", "-f"])
                .arg(dir.path().join(key))
                .output()
                .unwrap();
            assert!(out.status.success(), "ssh-keygen: {out:?}");
        }
        std::fs::copy(dir.path().join("client_key.pub"), dir.path().join("authorized_keys"))
            .unwrap();
        let port = crate::free_port();
        let d = dir.path().display();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nUsePAM no\nStrictModes no\n\
             PubkeyAuthentication yes\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n\
             ChrootDirectory none\nAllowTcpForwarding no\nX11Forwarding no\n\
             Subsystem sftp internal-sftp -d {upload}\n",
            upload = upload_dir.display()
        );
        let config_file = dir.path().join("sshd_config");
        std::fs::write(&config_file, config).unwrap();
        let mut child = Command::new(sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config_file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let server = SftpServer { port, dir, child, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.log().contains("Server listening on 127.0.0.1") {
            assert!(Instant::now() < deadline, "sshd did not start: {}", server.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(server)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Runs `sftp` with the batch `commands` (one per line; relative paths are in the upload
    /// directory) and `options` before the host (e.g. `-B 1024 -l 8` for a slow upload).
    pub fn sftp(&self, commands: &str, options: &[&str]) -> Output {
        let batch = tempfile::NamedTempFile::new_in(self.dir.path()).unwrap();
        std::fs::write(batch.path(), commands).unwrap();
        Command::new(find("sftp").unwrap())
            .arg("-b")
            .arg(batch.path())
            .arg("-i")
            .arg(self.dir.path().join("client_key"))
            .args(["-P", &self.port.to_string(), "-F", "/dev/null"])
            .args(["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"])
            .args(["-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR"])
            .args(options)
            .arg("127.0.0.1")
            .output()
            .unwrap()
    }
}

impl Drop for SftpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// As root, sshd wants its privilege separation directory, which the init system makes at boot
/// (`/run/sshd`, absent in a container): made here the same way. A non-root sshd needs none.
fn privsep_dir() {
    let uid = Command::new("id").arg("-u").output().map(|o| o.stdout).unwrap_or_default();
    if String::from_utf8_lossy(&uid).trim() == "0" && !Path::new("/run/sshd").is_dir() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o755).recursive(true).create("/run/sshd").unwrap();
    }
}
