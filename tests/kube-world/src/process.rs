//! Child processes that cannot outlive the test.
//!
//! Each child runs in its own process group (so killing it kills anything it forked) and
//! gets `PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills it if the test binary dies
//! without running destructors (SIGKILL, abort). Because that signal follows the *thread*
//! that forked the child, all children are spawned from one keeper thread that lives as
//! long as the process. Output goes to a log file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result, anyhow};

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn keeper() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("kube-world-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the kube-world spawner thread");
        Mutex::new(tx)
    })
}

/// A running child process, killed (with its process group) on drop.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Proc> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let (tx, rx) = mpsc::channel();
        keeper()
            .lock()
            .map_err(|_| anyhow!("spawner lock poisoned"))?
            .send((cmd, tx))
            .map_err(|_| anyhow!("spawner thread gone"))?;
        let child = rx
            .recv()
            .map_err(|_| anyhow!("spawner thread gone"))?
            .with_context(|| format!("starting {name} ({program})"))?;
        Ok(Proc {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `Err` with the end of the log if the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(anyhow!(
                "{} exited ({status}); log {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log, 256 * 1024)
            )),
        }
    }

    /// Kills the process group and reaps the child.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = self.child.id() as libc::pid_t;
            // SAFETY: plain syscalls on a pid (group) we own.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The end of a log file: its last 40 lines within the last `max` bytes, leaving out
/// the flag dump Kubernetes components print at start.
pub fn log_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("] FLAG: --")).collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
