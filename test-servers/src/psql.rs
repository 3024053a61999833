//! Probes of a PostgreSQL server without a client library, through the `psql` binary:
//! [`psql_call`] runs statements and returns their rows, [`PsqlSession`] keeps one session
//! open (to hold an advisory lock from `psql`, or wait for one).

use crate::postgres::{program, run, PostgresConn};
use crate::ServerError;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long [`psql_call`] and [`PsqlSession::query`] wait for an answer.
pub const PSQL_TIMEOUT: Duration = Duration::from_secs(10);

/// `psql` for `conn`: no `.psqlrc`, unaligned rows without headers, never a password prompt
/// (the password is in `PGPASSWORD`), messages in English.
fn psql_command(conn: &PostgresConn) -> Result<Command, ServerError> {
    let mut cmd = Command::new(program("psql")?);
    cmd.args(["-X", "-A", "-t", "-w", "-d", &conn.conninfo()])
        .env("PGPASSWORD", &conn.password)
        .env("LC_ALL", "C");
    for var in ["PGSERVICE", "PGOPTIONS", "PGSSLCERT", "PGSSLKEY"] {
        cmd.env_remove(var);
    }
    Ok(cmd)
}

/// Run `psql` for `conn` with `args` (and `input`), stopping at the first error; its output.
pub(crate) fn psql_run(
    conn: &PostgresConn,
    args: &[&str],
    input: &str,
) -> Result<String, ServerError> {
    let mut cmd = psql_command(conn)?;
    let timeout = format!("-c statement_timeout={}", PSQL_TIMEOUT.as_millis());
    cmd.args(["-v", "ON_ERROR_STOP=1"]).args(args).env("PGOPTIONS", timeout);
    let what = format!("psql as {} at {}:{}", conn.user, conn.host, conn.port);
    let out = run(&mut cmd, input).map_err(|e| ServerError::io(&what, e))?;
    if !out.status.success() {
        let error = String::from_utf8_lossy(&out.stderr);
        return Err(ServerError::command(format!("{what} failed"), error.trim_end()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_string())
}

/// Run `sql` with `psql -X -A -t -v ON_ERROR_STOP=1 -c <sql>` on a connection of its own for
/// `conn`, and return what it printed: the rows, one a line, columns separated by `|`,
/// without the last newline (`SELECT 1` gives `"1"`, `SELECT true` `"t"`). A refused
/// connection or a failed statement is [`ServerError::Command`] with `psql`'s message (a wrong
/// password: "password authentication failed for user ..."); 5 s to connect, and the statement
/// is cancelled after [`PSQL_TIMEOUT`] (its `statement_timeout`).
pub fn psql_call(conn: &PostgresConn, sql: &str) -> Result<String, ServerError> {
    psql_run(conn, &["-c", sql], "")
}

/// A long-lived `psql` session: one connection, one backend, kept open between statements,
/// so that what is tied to a session (a session-level advisory lock) stays held until the
/// session ends. Dropped, its `psql` is killed: the connection closes, and the backend ends,
/// releasing what it held, as soon as it notices (at once when idle).
///
/// Each statement sent is followed by `\echo` and `\warn` of a marker, which `psql` runs once
/// the statement is done: its rows are what the standard output holds before the marker, its
/// errors and notices what the standard error does. [`PsqlSession::send`] does not wait, so a
/// statement may block in the server (`SELECT pg_advisory_lock(7)` while another session holds
/// 7) while the test does something else; [`PsqlSession::wait_output`] says whether it is done.
pub struct PsqlSession {
    child: Child,
    stdin: ChildStdin,
    out: Receiver<Option<String>>,
    err: Receiver<Option<String>>,
    /// The statements sent and not yet waited for, by marker number.
    sent: VecDeque<u64>,
    next: u64,
    /// What the oldest of them printed so far, and whether its standard output is complete.
    rows: Vec<String>,
    rows_done: bool,
    notes: Vec<String>,
    messages: String,
    pid: u32,
    label: String,
}

/// Forward `r`'s lines to `tx`, then `None` at its end.
fn forward_lines(r: impl Read + Send + 'static) -> Receiver<Option<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// Whether a line `psql` wrote on its standard error says a statement or the connection failed
/// (not a `NOTICE` or `WARNING`).
fn is_error(line: &str) -> bool {
    ["ERROR:", "FATAL:", "PANIC:", "psql:", "server closed the connection", "connection to server"]
        .iter()
        .any(|p| line.starts_with(p))
}

impl PsqlSession {
    /// Connect with `psql` as `conn` says and wait until the session answers (its backend's
    /// pid: [`PsqlSession::backend_pid`]), or say why it did not (the connection refused).
    pub fn open(conn: &PostgresConn) -> Result<PsqlSession, ServerError> {
        let label = format!("psql session as {} at {}:{}", conn.user, conn.host, conn.port);
        let mut cmd = psql_command(conn)?;
        cmd.arg("-q").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| ServerError::io(format!("spawn {label}"), e))?;
        let stdin = child.stdin.take().expect("piped");
        let out = forward_lines(child.stdout.take().expect("piped"));
        let err = forward_lines(child.stderr.take().expect("piped"));
        let mut session = PsqlSession {
            child,
            stdin,
            out,
            err,
            sent: VecDeque::new(),
            next: 0,
            rows: Vec::new(),
            rows_done: false,
            notes: Vec::new(),
            messages: String::new(),
            pid: 0,
            label,
        };
        let pid = session.query("SELECT pg_backend_pid()")?;
        session.pid = pid
            .parse()
            .map_err(|_| ServerError::command(format!("{} has no backend", session.label), pid))?;
        Ok(session)
    }

    /// The process id of the session's backend (for `pg_terminate_backend`, `pg_locks`).
    pub fn backend_pid(&self) -> u32 {
        self.pid
    }

    /// Send `sql` (one statement or more; a `;` follows on a line of its own, ending the last
    /// if it was not) without waiting for it: [`PsqlSession::wait_output`] takes its output, statements' in the order
    /// sent.
    pub fn send(&mut self, sql: &str) -> Result<(), ServerError> {
        let n = self.next;
        self.next += 1;
        let marker = marker(n);
        let text = format!("{sql}\n;\n\\echo {marker}\n\\warn {marker}\n");
        let sent = self.stdin.write_all(text.as_bytes()).and_then(|()| self.stdin.flush());
        sent.map_err(|e| ServerError::io(format!("send to {}", self.label), e))?;
        self.sent.push_back(n);
        Ok(())
    }

    /// Wait up to `timeout` for the oldest statement sent and not yet waited for: `Ok(None)`
    /// while it runs (a wait for a lock; wait again later), its rows as [`psql_call`] gives
    /// them once it is done; [`ServerError::Command`] with the server's message if it failed,
    /// or if the session ended (its backend terminated, the server gone). Its notices and
    /// warnings are [`PsqlSession::messages`].
    pub fn wait_output(&mut self, timeout: Duration) -> Result<Option<String>, ServerError> {
        let Some(&n) = self.sent.front() else {
            return Err(ServerError::Invalid(format!("nothing was sent to {}", self.label)));
        };
        let deadline = Instant::now() + timeout;
        let marker = marker(n);
        while !self.rows_done {
            match self.out.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(line)) if line == marker => self.rows_done = true,
                Ok(Some(line)) => self.rows.push(line),
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Err(self.ended()),
            }
        }
        // `\warn` runs right after `\echo`.
        let deadline = deadline.max(Instant::now() + Duration::from_secs(5));
        loop {
            match self.err.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(line)) if line == marker => break,
                Ok(Some(line)) => self.notes.push(line),
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Err(self.ended()),
            }
        }
        self.sent.pop_front();
        self.rows_done = false;
        let rows = std::mem::take(&mut self.rows).join("\n");
        self.messages = std::mem::take(&mut self.notes).join("\n");
        if self.messages.lines().any(is_error) {
            return Err(ServerError::command(format!("{} failed", self.label), &self.messages));
        }
        Ok(Some(rows))
    }

    /// [`PsqlSession::send`] `sql` and wait for its rows ([`PSQL_TIMEOUT`] at most: a
    /// statement still running then is [`ServerError::Command`], and stays the next to wait
    /// for).
    pub fn query(&mut self, sql: &str) -> Result<String, ServerError> {
        self.send(sql)?;
        let rows = self.wait_output(PSQL_TIMEOUT)?;
        let what = format!("{} did not finish `{sql}` within {PSQL_TIMEOUT:?}", self.label);
        rows.ok_or(ServerError::Command { what, answer: None })
    }

    /// The notices and warnings of the last statement waited for ("WARNING:  you don't own a
    /// lock of type ExclusiveLock" from an unlock of a lock not held).
    pub fn messages(&self) -> &str {
        &self.messages
    }

    /// How many statements were sent and not waited for yet.
    pub fn pending(&self) -> usize {
        self.sent.len()
    }

    /// The error of a session whose `psql` ended: what it wrote last.
    fn ended(&mut self) -> ServerError {
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(Some(line)) =
            self.err.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.notes.push(line);
        }
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        ServerError::command(format!("{} ended ({status})", self.label), self.notes.join("\n"))
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The marker `\echo` and `\warn` print after statement `n` of a session.
fn marker(n: u64) -> String {
    format!("__test_servers_psql_done_{n}__")
}
