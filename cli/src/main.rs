//! `dlock`: who holds which lock, who waits for it, and freeing a stuck one,
//! on every deployment `leasehold` supports.
//!
//! This file parses the arguments and dispatches; each subcommand lives in
//! its own module and uses only the public API of `leasehold`.

mod connect;
mod doctor;
mod failure;
mod format;
mod locks;
mod ls;
mod password;
mod release;
mod show;
mod top;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::connect::Target;
use crate::failure::Failure;
use crate::locks::Kind;

/// Exit codes, shown at the end of `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the lock server answered with an error, or the terminal failed
  2  bad usage: unknown argument, bad URL or option
  3  the lock server cannot be reached (connection, TLS, unknown Sentinel service)
  4  not done: `release` without --force, or not confirmed
  5  refused: the server turned the credentials down, or its ACL lacks a rule
  6  doctor: every node answered, but a setting weakens the lock's guarantees
  7  doctor: locks work, but a node (a Sentinel, a Redlock node) failed
  8  verify: a second holder was granted a lock while a lease was valid, and fencing caught it
  9  verify: a double grant reached the counter, an update was lost, or a token went down";

/// Inspect and operate the locks of `leasehold` in Redis.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, after_help = EXIT_CODES, args_override_self = true)]
struct Cli {
    #[command(flatten)]
    target: Target,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Held locks of every kind whose key matches PATTERN, one line each:
    /// kind (lock, rw, semaphore), how many hold it, the holder (of several:
    /// the writer, else the lease ending first), how long held, ttl left,
    /// fencing counter and waiters recorded in the backend.
    Ls {
        /// Glob over keys (without namespace): `*`, `?`, `[abc]`, `\` escapes.
        #[arg(default_value = "*")]
        pattern: String,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Everything known about what holds KEY: its lock (holder, remaining
    /// lease, fencing counter, queued waiters), read/write lock or semaphore
    /// (each holder and its remaining lease), whichever kinds are held, as
    /// `ls` finds them; the plain lock as free when none is. With --kind,
    /// that kind only, held or not. --json prints one object (with its
    /// `kind`), or an array when several kinds of KEY are held. A server in
    /// its lock-delay after a failover or restart (it grants nothing) is
    /// shown with the time left and when it ends (JSON: `lock_delay`).
    Show {
        /// The lock's key, without namespace.
        key: String,
        /// Which of KEY's locks to show (default: every kind that is held).
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Frees the lock on KEY whoever holds it, and raises its fencing counter;
    /// with --kind, the read/write lock of KEY (its writer and every reader;
    /// the writers' fencing counter is raised) or its semaphore (every permit).
    ///
    /// This evicts a live holder: its body is cancelled at its next renewal,
    /// but whatever it writes meanwhile is rejected only by storage that
    /// checks fencing tokens. Asks for confirmation unless --yes.
    Release {
        /// The lock's key, without namespace.
        key: String,
        /// Which of KEY's locks to free.
        #[arg(long, value_enum, default_value_t = Kind::Lock)]
        kind: Kind,
        /// Required: says you mean to evict whoever holds the lock.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation on stdin.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Checks the deployment as `LockManager::check` does, without taking a
    /// lock: each node (round trip, server and version, native commands),
    /// every ACL rule the locks need, and the settings that weaken the
    /// lock's guarantees (eviction, unacknowledged replicas, no append-only
    /// file, a clock that jumped). Exit code 0 when healthy, 6 at risk, 7
    /// degraded, 5 when credentials or an ACL rule are refused.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A bounded contest against the deployment, to check its mutual
    /// exclusion: worker processes of its own contend for a few keys in a
    /// namespace of their own, each hold doing a fenced read-modify-write
    /// of a counter on the deployment, while workers are stopped and
    /// killed, their links cut, slowed and reset (one server, Redlock) and,
    /// with --allow-failover, the deployment fails over once. Reports
    /// double grants at the lock and at the counter, lost updates, tokens
    /// that went down, overruns, hand-off latency and recovery; deletes
    /// every key it wrote. Exit code 0 pass, 8 lock-failed, 9 violated.
    Verify {
        #[command(flatten)]
        contest: verify::Contest,
    },
    /// One worker of `verify` (run by it).
    #[command(hide = true)]
    VerifyWorker {
        #[command(flatten)]
        contest: verify::Contest,
        /// The worker's number.
        #[arg(long)]
        worker_id: usize,
    },
    /// A live view of held locks of every kind, refreshed every second: keys
    /// with the most waiters, the longest holds (read/write locks and
    /// semaphores marked with their kind), and plain locks whose holder
    /// changed or vanished. Quit with q or Esc.
    Top {
        /// Glob over keys (without namespace).
        #[arg(default_value = "*")]
        pattern: String,
        /// Print one frame as text and exit.
        #[arg(long)]
        once: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return report(&Failure::Io(err)),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(&failure),
    }
}

/// Runs the subcommand of `cli`.
async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Ls { pattern, json } => {
            let manager = cli.target.connect().await?;
            ls::run(&manager, &pattern, json).await
        }
        Command::Show { key, kind, json } => {
            let manager = cli.target.connect().await?;
            show::run(&manager, &key, kind, json).await
        }
        Command::Release {
            key,
            kind,
            force,
            yes,
            json,
        } => {
            if !force {
                return Err(Failure::NotDone(release::WITHOUT_FORCE.to_owned()));
            }
            let manager = cli.target.connect().await?;
            release::run(&manager, &key, kind, yes, json).await
        }
        Command::Doctor { json } => {
            let manager = cli.target.connect().await?;
            doctor::run(&manager, json).await
        }
        Command::Verify { contest } => verify::run(&cli.target, contest).await,
        Command::VerifyWorker { contest, worker_id } => {
            let contest = contest.for_worker(&cli.target)?;
            verify::worker::run(&cli.target, &contest, worker_id).await
        }
        Command::Top { pattern, once } => {
            let manager = cli.target.connect().await?;
            let title = cli.target.describe();
            if once {
                top::once(&manager, &title, &pattern).await
            } else {
                top::live(&manager, &title, &pattern).await
            }
        }
    }
}

/// Prints `failure` on stderr and returns its exit code.
fn report(failure: &Failure) -> ExitCode {
    eprintln!("dlock: {failure}");
    ExitCode::from(failure.exit_code())
}
