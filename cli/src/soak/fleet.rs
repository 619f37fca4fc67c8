//! The processes the soak starts: its workers (this binary as `soak-worker`, one Unix
//! socket each) and its managers (this binary as `manager --foreground`, in the soak's
//! private runtime directory). Each is signalled only by its pid, and reaped.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use shmrc::manager::RuntimeDir;
use shmrc::manager::status_at;
use shmrc::{Error, Result, ShareHandle, transport};

/// How long a worker may take to answer one command, or to connect.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// The environment shared by the soak's workers and managers.
pub struct Setting {
    /// This program.
    pub program: PathBuf,
    /// The private runtime directory (`SHMRC_RUNTIME_DIR`).
    pub runtime: PathBuf,
    /// The namespace prefix of every buffer.
    pub namespace: String,
    /// The managers' grace period.
    pub grace: Duration,
}

impl Setting {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command
            .env("SHMRC_RUNTIME_DIR", &self.runtime)
            .env("SHMRC_MANAGER", "auto")
            .env("SHMRC_MANAGER_PROGRAM", &self.program)
            .env("SHMRC_MANAGER_GRACE_MS", self.grace.as_millis().to_string());
        command
    }
}

/// One worker process.
pub struct Worker {
    child: Child,
    stream: UnixStream,
    /// Its number (unique in the run).
    pub id: u32,
}

/// A worker's answer: its text and the handles that came with it.
pub struct Answer {
    pub text: String,
    pub handles: Vec<ShareHandle>,
}

impl Worker {
    /// Starts worker `id` and waits for its `hello` on `listener` (non-blocking).
    pub fn start(
        setting: &Setting,
        listener: &UnixListener,
        socket: &Path,
        id: u32,
    ) -> Result<Worker> {
        let mut child = setting
            .command()
            .arg("soak-worker")
            .arg("--socket")
            .arg(socket)
            .arg("--id")
            .arg(id.to_string())
            .arg("--namespace")
            .arg(&setting.namespace)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| Error::os("spawn soak-worker", e))?;
        match accept(listener, &mut child) {
            Ok(stream) => {
                let worker = Worker { child, stream, id };
                let hello = worker.receive()?;
                let expected = format!("hello {id} {}", worker.child.id());
                if hello.text != expected {
                    return Err(Error::InvalidArgument(format!(
                        "worker {id} said {:?}, not {expected:?}",
                        hello.text
                    )));
                }
                Ok(worker)
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// Sends a command with handles, without waiting for the answer.
    pub fn send(&self, command: &str, handles: Vec<ShareHandle>) -> Result<()> {
        transport::send(&self.stream, command.as_bytes(), handles)
    }

    /// The next answer (within [`ANSWER_LIMIT`]).
    pub fn receive(&self) -> Result<Answer> {
        let message = transport::recv(&self.stream)?;
        Ok(Answer {
            text: String::from_utf8_lossy(&message.payload).into_owned(),
            handles: message.handles,
        })
    }

    /// Sends a command and waits for its answer.
    pub fn ask(&self, command: &str, handles: Vec<ShareHandle>) -> Result<Answer> {
        self.send(command, handles)?;
        self.receive()
    }

    /// SIGKILLs it (our child, by pid) and reaps it; returns when it was killed.
    pub fn kill(mut self) -> Instant {
        let at = Instant::now();
        let _ = self.child.kill();
        let _ = self.child.wait();
        at
    }

    /// Asks it to exit; SIGKILLs it if it does not say `bye`. Whether it said it.
    pub fn exit(mut self) -> bool {
        let bye = self.ask("exit", vec![]).is_ok_and(|a| a.text == "bye");
        let deadline = Instant::now() + ANSWER_LIMIT;
        while bye && Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bye
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn accept(listener: &UnixListener, child: &mut Child) -> Result<UnixStream> {
    let deadline = Instant::now() + ANSWER_LIMIT;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .and_then(|()| stream.set_read_timeout(Some(ANSWER_LIMIT)))
                    .map_err(|e| Error::os("set up a worker's socket", e))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::os("accept a worker", e)),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::InvalidArgument(format!(
                "a soak worker exited before it connected: {status}"
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::InvalidArgument(format!(
                "a soak worker did not connect within {ANSWER_LIMIT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The managers of the soak's runtime directory: the ones it started (reaped at the
/// end), and the thread that SIGCONTs the one it SIGSTOPped, if any.
pub struct Managers {
    runtime: RuntimeDir,
    started: Vec<Child>,
    stopped: Option<Resumer>,
}

/// A thread that SIGCONTs a stopped manager when its time is up (whatever the soak's
/// own thread is waiting for meanwhile), or at once when told.
struct Resumer {
    now: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Managers {
    /// Starts the first manager and waits until it answers.
    pub fn start(setting: &Setting) -> Result<Managers> {
        let mut managers = Managers {
            runtime: RuntimeDir::at(&setting.runtime),
            started: Vec::new(),
            stopped: None,
        };
        managers.start_another(setting)?;
        let deadline = Instant::now() + ANSWER_LIMIT;
        while managers.pid().is_none() {
            if Instant::now() > deadline {
                return Err(Error::InvalidArgument(format!(
                    "the soak's manager did not answer within {ANSWER_LIMIT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(managers)
    }

    /// Starts a manager (one that finds another running exits by itself).
    pub fn start_another(&mut self, setting: &Setting) -> Result<()> {
        let child = setting
            .command()
            .args(["manager", "--foreground"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::os("spawn a manager", e))?;
        self.started.push(child);
        Ok(())
    }

    /// The pid of the manager that answers now (`None` while none does).
    pub fn pid(&self) -> Option<u32> {
        status_at(&self.runtime).ok().map(|status| status.pid)
    }

    /// SIGKILLs the manager that answers now, by pid; whether there was one.
    pub fn kill(&mut self) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        signal(pid, Signal::SIGKILL);
        self.reap();
        true
    }

    /// SIGSTOPs the manager that answers now, by pid, for `length`; whether there
    /// was one.
    pub fn stop(&mut self, length: Duration) -> bool {
        self.resume();
        let Some(pid) = self.pid() else {
            return false;
        };
        signal(pid, Signal::SIGSTOP);
        let (now, told) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = told.recv_timeout(length);
            signal(pid, Signal::SIGCONT);
        });
        self.stopped = Some(Resumer { now, thread });
        true
    }

    /// SIGCONTs the manager this soak stopped (if its time is not up yet) and waits
    /// until it has been.
    pub fn resume(&mut self) {
        if let Some(resumer) = self.stopped.take() {
            let _ = resumer.now.send(());
            let _ = resumer.thread.join();
        }
    }

    /// Waits up to `limit` for every manager to exit (after its grace period). Those
    /// still running then are SIGKILLed, by pid, and described in the error.
    pub fn wait_gone(&mut self, limit: Duration) -> std::result::Result<(), String> {
        self.resume();
        let deadline = Instant::now() + limit;
        // A connection waiting when the grace period ends gives the manager a fresh
        // one: the manager answering is asked for its pid once, then watched in /proc.
        let mut watched = None;
        loop {
            self.reap();
            watched = watched.filter(|pid| Path::new(&format!("/proc/{pid}")).exists());
            if watched.is_none() {
                watched = self.pid();
            }
            if self.started.is_empty() && watched.is_none() {
                return Ok(());
            }
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let answering = self.pid();
        let mut left: Vec<String> = self
            .started
            .iter()
            .map(|child| describe(child.id(), "started by the soak"))
            .collect();
        if let Some(pid) = answering {
            left.push(describe(pid, "answering"));
            signal(pid, Signal::SIGKILL);
        }
        for child in &mut self.started {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.started.clear();
        Err(left.join("; "))
    }

    fn reap(&mut self) {
        self.started
            .retain_mut(|child| matches!(child.try_wait(), Ok(None)));
    }
}

impl Drop for Managers {
    fn drop(&mut self) {
        self.resume();
        for child in &mut self.started {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A process as `/proc` shows it: pid, role, state and command line.
fn describe(pid: u32, role: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map_or("?", |(_, rest)| &rest[..1]);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default();
    format!("pid {pid} ({role}, state {state}: {})", cmdline.trim_end())
}

fn signal(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}
