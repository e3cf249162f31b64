//! [`PostgresServer`]: a real PostgreSQL server of the tests' own, as
//! [`RedisServer`](crate::RedisServer) is for Redis: `initdb` into a
//! [`TempDir`], `pg_ctl start` on a free loopback port, `pg_ctl stop` and
//! the directory removed on drop.
//!
//! The binaries are Debian's (`/usr/lib/postgresql/<major>/bin`, the
//! newest installed; `scripts/ensure-postgres` installs the package), or
//! those in the directory `LEASEHOLD_POSTGRES_BIN` names. PostgreSQL refuses
//! to run as root: a root process runs `initdb` and `pg_ctl` as the
//! `postgres` user the Debian package creates, through `runuser`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::ports::PortReservation;
use crate::process::log_tail;
use crate::tempdir::TempDir;

/// Environment variable naming the directory of `initdb` and `pg_ctl`.
pub const POSTGRES_BIN_ENV: &str = "LEASEHOLD_POSTGRES_BIN";

/// Where Debian installs each major version's binaries.
const DEBIAN_BIN_DIRS: &str = "/usr/lib/postgresql";

/// The user a root process runs the server as (Debian's package creates it).
const SERVER_USER: &str = "postgres";

/// The superuser `initdb` creates; the URL logs in as it, trusted.
const SUPERUSER: &str = "leasehold";

/// Seconds `pg_ctl` waits for the server to accept connections, or to stop.
const PG_CTL_WAIT_SECS: &str = "60";

/// Starts with a port another process took in the meantime are retried.
const START_ATTEMPTS: usize = 3;

/// A PostgreSQL server on a free `127.0.0.1` port, its data in a temporary
/// directory, with one superuser (trusted, no password) and the database
/// `postgres`. Written for tests: no fsync, so it is fast and would lose
/// data on a crash of the machine. Stopped (immediately) and removed on
/// drop, also when a test panics.
#[derive(Debug)]
pub struct PostgresServer {
    tools: Tools,
    port: PortReservation,
    /// Declared last: removed after the server stopped.
    dir: TempDir,
}

impl PostgresServer {
    /// Initialises a cluster in a fresh directory and starts its server;
    /// panics with what to do when PostgreSQL is not installed or does not
    /// start.
    pub fn start() -> PostgresServer {
        let tools = Tools::find();
        let dir = TempDir::new("postgres")
            .unwrap_or_else(|e| panic!("cannot create the PostgreSQL directory: {e}"));
        if tools.run_as.is_some() {
            // The server's user creates its data directory (mode 0700) in it.
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap_or_else(
                |e| panic!("cannot open {} to {SERVER_USER}: {e}", dir.path().display()),
            );
        }
        let data = dir.path().join("data");
        let init = tools.run(
            "initdb",
            &[
                "--pgdata".as_ref(),
                data.as_os_str(),
                format!("--username={SUPERUSER}").as_ref(),
                "--auth=trust".as_ref(),
                "--encoding=UTF8".as_ref(),
                "--locale=C".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        init.unwrap_or_else(|e| panic!("initdb failed: {e}"));
        let log = dir.path().join("postgres.log");
        let mut failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = PortReservation::free().unwrap_or_else(|e| panic!("{e:?}"));
            // Loopback TCP only; the socket in the test's own directory; no
            // durability (a test's data dies with it anyway).
            let options = format!(
                "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
                 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
                port.port(),
                dir.path().display()
            );
            let started = tools.run(
                "pg_ctl",
                &[
                    "start".as_ref(),
                    "--wait".as_ref(),
                    "--timeout".as_ref(),
                    PG_CTL_WAIT_SECS.as_ref(),
                    "--pgdata".as_ref(),
                    data.as_os_str(),
                    "--log".as_ref(),
                    log.as_os_str(),
                    "--options".as_ref(),
                    options.as_ref(),
                ],
            );
            match started {
                Ok(()) => return PostgresServer { tools, port, dir },
                Err(e) => {
                    // Most likely another process took the port: stop what
                    // may have started, and try another.
                    let _ = tools.stop(&data);
                    failure = format!("{e}; server log:\n{}", log_tail(&log));
                }
            }
        }
        panic!("PostgreSQL did not start in {START_ATTEMPTS} attempts: {failure}")
    }

    /// The URL of the database `postgres` as the superuser, over TCP:
    /// `postgres://leasehold@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port())
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port.port()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Best effort: a server that cannot be stopped is reported, not fatal.
        if let Err(e) = self.tools.stop(&self.dir.path().join("data")) {
            eprintln!("cannot stop PostgreSQL on port {}: {e}", self.port());
        }
    }
}

/// How to run PostgreSQL's programs here: where they are, and as whom.
#[derive(Debug)]
struct Tools {
    bin: PathBuf,
    /// The user to run them as, when this process is root.
    run_as: Option<&'static str>,
}

impl Tools {
    /// The binaries of [`POSTGRES_BIN_ENV`], else of the newest Debian
    /// major version installed; panics with what to install when none is.
    fn find() -> Tools {
        let bin = std::env::var_os(POSTGRES_BIN_ENV)
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(newest_debian_bin_dir)
            .unwrap_or_else(|| {
                panic!(
                    "PostgreSQL is not installed (no {DEBIAN_BIN_DIRS}/<major>/bin/initdb): run \
                     scripts/ensure-postgres (or `apt-get install -y postgresql`), or set \
                     {POSTGRES_BIN_ENV} to the directory of initdb and pg_ctl"
                )
            });
        if !bin.join("initdb").is_file() {
            panic!(
                "{} has no initdb ({POSTGRES_BIN_ENV} or the Debian package)",
                bin.display()
            );
        }
        let root = fs::metadata("/proc/self").is_ok_and(|own| own.uid() == 0);
        Tools {
            bin,
            run_as: root.then_some(SERVER_USER),
        }
    }

    /// Runs `program` with `args` (as [`SERVER_USER`] when root), and
    /// returns its output as the error when it fails.
    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        let path = self.bin.join(program);
        let mut command = match self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&path);
                command
            }
            None => Command::new(&path),
        };
        let output = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {}: {}",
                output.status,
                both_streams(&output)
            ))
        }
    }

    /// Stops the server of `data` at once (`pg_ctl stop -m immediate`).
    fn stop(&self, data: &Path) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &[
                "stop".as_ref(),
                "--wait".as_ref(),
                "--timeout".as_ref(),
                PG_CTL_WAIT_SECS.as_ref(),
                "--mode=immediate".as_ref(),
                "--pgdata".as_ref(),
                data.as_os_str(),
            ],
        )
    }
}

/// `/usr/lib/postgresql/<major>/bin` of the highest major version that has
/// an `initdb`.
fn newest_debian_bin_dir() -> Option<PathBuf> {
    fs::read_dir(DEBIAN_BIN_DIRS)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
}

/// A failed program's stderr and stdout, for the panic message.
fn both_streams(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    )
}
