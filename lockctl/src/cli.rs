//! The command line: how to reach the service (the same options as the benchmark harness's
//! `service` engine), and the subcommands.

use crate::exit::EXIT_CODES_HELP;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// `lockctl`'s command line.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    about = "Hold a lock of the lock service around any command, see who holds what, free a \
             lock as an administrator, change the cluster's membership",
    after_help = EXIT_CODES_HELP,
    after_long_help = AFTER_LONG_HELP,
)]
pub struct Cli {
    /// How to reach the service.
    #[command(flatten)]
    pub connect: Connect,
    /// What to print: text for people, or JSON (one object per line) for scripts.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text, global = true)]
    pub output: Output,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

const AFTER_LONG_HELP: &str = concat!(
    "Examples:\n",
    "  export LOCK_SERVICE=10.0.0.1:7401,10.0.0.2:7401,10.0.0.3:7401\n",
    "  lockctl lock nightly-backup -- /usr/local/bin/backup --full\n",
    "  lockctl lock --try deploy -- ./deploy.sh || echo \"someone else is deploying\"\n",
    "  lockctl lock -n 4 --timeout 30s encoder-slots -- ffmpeg -i in.mkv out.mp4\n",
    "  lockctl elect scheduler -- ./run-scheduler      # runs while it leads\n",
    "  lockctl elect --observe scheduler\n",
    "  lockctl locks deploy\n",
    "  LOCK_SERVICE_TOKEN=... lockctl --service-user root release --force deploy\n",
    "\n",
    "The command runs with LOCK_NAME and LOCK_FENCING_TOKEN in its environment (and\n",
    "LOCK_PERMITS, with -n; with elect, the token is the leader's term and LOCK_LEADER_VALUE\n",
    "what it announces), in a process group of its own: when the lock is lost, the whole\n",
    "group is sent SIGTERM, then SIGKILL after --grace, so nothing it started outlives the\n",
    "lock. lockctl forwards SIGINT, SIGTERM and SIGHUP to the group, waits for the command, then\n",
    "releases the lock. Not being the terminal's foreground group, the command cannot read from\n",
    "the terminal.\n",
    "\n",
    crate::exit_codes_help!(),
);

/// How to reach the service: the nodes, TLS, and who this client is.
#[derive(Debug, Clone, Args)]
pub struct Connect {
    /// The service's nodes, as HOST:PORT of their client ports, comma-separated (any of them
    /// will do: the client finds the leader). Also read from LOCK_SERVICE, or
    /// LOCK_SERVICE_ENDPOINTS as the benchmark harness names it.
    #[arg(long, env = "LOCK_SERVICE", value_name = "HOST:PORT,...", global = true)]
    pub service: Option<String>,
    /// Speak TLS, trusting the CA in this PEM file (the one that signed the nodes'
    /// certificates, which must name the host dialled).
    #[arg(long, visible_alias = "ca", value_name = "FILE", global = true)]
    pub service_ca: Option<PathBuf>,
    /// Log in as this user (a service started with --users); its token is read from the
    /// environment variable LOCK_SERVICE_TOKEN or from --service-token-file, never from the
    /// command line.
    #[arg(long, visible_alias = "user", value_name = "USER", global = true)]
    pub service_user: Option<String>,
    /// The file holding --service-user's token (its first line).
    #[arg(long, visible_alias = "token-file", value_name = "FILE", global = true)]
    pub service_token_file: Option<PathBuf>,
    /// How long a request may take, across reconnects and a leader's failover.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION", global = true)]
    pub request_timeout: Duration,
}

/// What to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// One JSON object per line, for scripts.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock (or some of a semaphore's permits).
    Lock(LockArgs),
    /// Run a command while leading an election (its term as the fencing token), or follow
    /// who leads it (--observe).
    Elect(ElectArgs),
    /// Every member's view of the cluster: leader, term, committed and applied index,
    /// sessions, locks.
    Status,
    /// The locks (whose names start with PREFIX): who holds each, with what token, since
    /// when, and who waits.
    Locks {
        /// Only locks whose names start with this.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Take a lock from whoever holds it (administrators only): its holder is told, and its
    /// `lockctl lock` stops its command; the lock goes to the next waiter.
    Release {
        /// Required: this takes the lock from a holder that may still be using it.
        #[arg(long, required = true)]
        force: bool,
        /// The lock's name.
        name: String,
    },
    /// List, add or remove the cluster's members.
    #[command(subcommand)]
    Member(MemberCommand),
}

/// `lockctl lock`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct LockArgs {
    /// The lock's name (at most 200 bytes, no '/' and no control characters).
    pub name: String,
    /// Give up waiting after this long (exit 124); without it, wait as long as it takes.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "try_only")]
    pub timeout: Option<Duration>,
    /// Do not wait: exit 75 at once if another holds the lock.
    #[arg(long = "try")]
    pub try_only: bool,
    /// Hold one of N permits of a semaphore of this name (up to N holders at once) instead
    /// of the lock alone.
    #[arg(short = 'n', long = "limit", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// The session and the command's stopping.
    #[command(flatten)]
    pub holding: Holding,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What `lock` and `elect` share: the session that holds, and how the command is stopped.
#[derive(Debug, Clone, Args)]
pub struct Holding {
    /// The session's TTL: a lockctl that cannot reach the service for this long loses the
    /// lock or the leadership (and stops the command).
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub ttl: Duration,
    /// After the lock or the leadership is lost, how long the command has after SIGTERM
    /// before SIGKILL.
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "DURATION")]
    pub grace: Duration,
    /// The owner name the service shows for this holder (default: lockctl-HOST-PID).
    #[arg(long)]
    pub owner: Option<String>,
}

/// `lockctl elect`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ElectArgs {
    /// The election's name (a lock name: at most 200 bytes, no '/').
    pub name: String,
    /// What this candidate announces once it leads (default: its owner name).
    #[arg(long, conflicts_with = "observe")]
    pub value: Option<String>,
    /// Do not campaign: print who leads, and each change, until interrupted.
    #[arg(long)]
    pub observe: bool,
    /// Give up campaigning after this long (exit 124).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "observe")]
    pub timeout: Option<Duration>,
    /// The session and the command's stopping.
    #[command(flatten)]
    pub holding: Holding,
    /// The command to run while leading, and its arguments.
    #[arg(
        last = true,
        required_unless_present = "observe",
        conflicts_with = "observe",
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

/// `lockctl member`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// The members, as the leader's membership lists them.
    List,
    /// Add a running node (started with --id ID, its own addresses, and no --init) as a
    /// learner, and make it a voter once it has caught up (administrators only). Give it a
    /// --request-timeout long enough for the node to catch up (the service waits up to 60 s).
    Add {
        /// Its node id, never used before in this cluster (a node that lost its disk comes
        /// back under a new id).
        id: u64,
        /// Where the other nodes reach its peer port.
        #[arg(long, value_name = "HOST:PORT")]
        peer: String,
        /// Where clients reach its client port.
        #[arg(long, value_name = "HOST:PORT")]
        client: String,
    },
    /// Take a node out of the cluster (administrators only); stop it once this returns.
    Remove {
        /// Its node id.
        id: u64,
    },
}

/// A duration: `500ms`, `10s`, `2m`, `1h`, or a number of seconds (`1.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => s.split_at(at),
        None => (s, "s"),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (say 500ms, 10s, 2m or 1h)"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("{s:?}: unknown unit {other:?} (ms, s, m or h)")),
    };
    let secs = value * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn lock_takes_its_command_after_a_double_dash() {
        let cli =
            Cli::try_parse_from(["lockctl", "lock", "--try", "job", "--", "echo", "--x"]).unwrap();
        let Command::Lock(args) = cli.command else { panic!("{:?}", cli.command) };
        assert_eq!(args.name, "job");
        assert!(args.try_only);
        assert_eq!(args.command, ["echo", "--x"]);
        assert!(Cli::try_parse_from(["lockctl", "lock", "job"]).is_err(), "no command");
        let both = ["lockctl", "lock", "--try", "--timeout", "1s", "job", "--", "true"];
        assert!(Cli::try_parse_from(both).is_err(), "--try and --timeout");
        assert!(Cli::try_parse_from(["lockctl", "release", "job"]).is_err(), "no --force");
        assert!(Cli::try_parse_from(["lockctl", "elect", "e", "--", "true"]).is_ok());
        assert!(Cli::try_parse_from(["lockctl", "elect", "--observe", "e"]).is_ok());
        assert!(Cli::try_parse_from(["lockctl", "elect", "e"]).is_err(), "no command");
    }
}
