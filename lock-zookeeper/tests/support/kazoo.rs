//! kazoo, the Python ZooKeeper client, run as a contender: a `python3 -c` script driven by
//! lines on its stdin, answering on its stdout.
//!
//! kazoo must be installed: `scripts/test.sh` installs Debian's `python3-kazoo` when no Python
//! on the machine has kazoo. Without it the tests fail saying what to install; they never pass
//! unrun.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// A Python interpreter that has kazoo with `extra_lock_patterns` (2.7.1 and later):
/// `LOCK_TEST_PYTHON` if set, else `python3` on the PATH, else Debian's `/usr/bin/python3`
/// (where `python3-kazoo` installs). Panics, saying what to install, if none has it.
pub fn python_with_kazoo() -> String {
    let check = "import inspect, kazoo.recipe.lock as l; \
                 assert 'extra_lock_patterns' in inspect.signature(l.Lock.__init__).parameters";
    let candidates: Vec<String> = match std::env::var("LOCK_TEST_PYTHON") {
        Ok(p) => vec![p],
        Err(_) => vec!["python3".into(), "/usr/bin/python3".into()],
    };
    let has_kazoo = |py: &String| {
        std::process::Command::new(py)
            .args(["-c", check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    match candidates.iter().find(|py| has_kazoo(py)) {
        Some(py) => py.clone(),
        None => panic!(
            "kazoo (the Python ZooKeeper client, 2.7.1 or later) is not installed for any of \
             {candidates:?}: these tests run kazoo's Lock against ours. Install it with \
             `apt-get install python3-kazoo` (Debian) or `pip install kazoo`, or run \
             scripts/test.sh, which installs it; LOCK_TEST_PYTHON=<interpreter> names another \
             Python that has it."
        ),
    }
}

/// One kazoo contender process (killed on drop). Its answers are read by a thread of their
/// own, so that waiting for one never blocks the runtime.
pub struct Kazoo {
    pub name: String,
    /// What it said before `ready`.
    preamble: Vec<String>,
    child: Child,
    stdin: ChildStdin,
    answers: UnboundedReceiver<String>,
}

impl Kazoo {
    /// Run `script` (a `python3 -c` script whose arguments are the test server's hosts, then
    /// `args`) as the contender named `name`, and wait until it says `ready` (its session is
    /// up).
    pub async fn start(python: &str, script: &str, name: &str, args: &[&str]) -> Kazoo {
        let hosts = super::shared().hosts();
        let mut child = Command::new(python)
            .args(["-c", script, &hosts])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, answers) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut kazoo = Kazoo { name: name.into(), preamble: Vec::new(), child, stdin, answers };
        loop {
            match kazoo.answer(Duration::from_secs(30)).await {
                line if line == "ready" => return kazoo,
                line => kazoo.preamble.push(line),
            }
        }
    }

    /// Whether it said `line` before `ready`.
    pub fn said(&self, line: &str) -> bool {
        self.preamble.iter().any(|l| l == line)
    }

    /// Send it a command (a pipe write of a few bytes: it does not block).
    pub fn send(&mut self, line: &str) {
        self.stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next line it answers, within `within`.
    pub async fn answer(&mut self, within: Duration) -> String {
        match self.try_answer(within).await {
            Some(line) => line,
            None => panic!("kazoo contender {} silent for {within:?}", self.name),
        }
    }

    /// The next line it answers, if one comes within `within`.
    pub async fn try_answer(&mut self, within: Duration) -> Option<String> {
        match tokio::time::timeout(within, self.answers.recv()).await {
            Ok(Some(line)) => Some(line),
            Ok(None) => panic!("kazoo contender {} ended", self.name),
            Err(_) => None,
        }
    }
}

impl Drop for Kazoo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
