//! Helpers of the `dlock` tests: the built binary run with a time limit, and
//! a holder process (this test binary run again) that holds locks and says
//! on stdout when it holds them and when it loses them.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use leasehold::{LockManager, LockOptions};

/// Longest a `dlock` run or a wait for the holder process may take.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The lease the holder process asks for: renewed every second, so that an
/// eviction is noticed within about a second.
pub const HOLDER_TTL: Duration = Duration::from_secs(3);

/// The manager name the holder process records in its tokens.
pub const HOLDER_NAME: &str = "orders-api";

/// The label of the holder process's acquisitions.
pub const HOLDER_LABEL: &str = "shop::buy";

/// What one run of `dlock` did.
#[derive(Debug)]
pub struct Run {
    /// Its exit code (`None` if a signal ended it).
    pub code: Option<i32>,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

impl Run {
    /// Panics with the run's output unless it exited with `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{self:#?}");
        assert!(!self.stderr.contains("panicked"), "{self:#?}");
        self
    }
}

/// Runs the built `dlock` with `args` and `stdin` as its standard input,
/// without `REDIS_URL` from the environment; at most [`PATIENCE`].
pub async fn dlock(args: &[&str], stdin: &str) -> Run {
    dlock_with_env(args, &[], stdin).await
}

/// As [`dlock`], with the environment variables `env` set (and, unless
/// set there, neither `REDIS_URL` nor `DLOCK_PASSWORD`).
pub async fn dlock_with_env(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Run {
    let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || run_blocking(&args, &env, &stdin))
        .await
        .expect("the dlock runner")
}

fn run_blocking(args: &[String], env: &[(String, String)], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("DLOCK_PASSWORD")
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dlock");
    // A command that does not read stdin may be gone before this is written.
    let _ = child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes());
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for dlock") {
            break status;
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("dlock {args:?} ran longer than {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// Reads `stream` to its end on a thread of its own.
fn drain(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text
    })
}

/// Where the holder process connects, and what it holds.
const CHILD_URLS: &str = "DLOCK_TEST_HOLDER_URLS";
const CHILD_CLUSTER: &str = "DLOCK_TEST_HOLDER_CLUSTER";
const CHILD_KEYS: &str = "DLOCK_TEST_HOLDER_KEYS";

/// The holder process's body: connects as [`HOLDER_NAME`] (to a cluster if
/// so told), takes each key with a fencing token and prints
/// `HOLDING <key> <token>`; prints `LOST <key>` when a lease is lost; exits
/// after 60 s. Does nothing outside a holder process.
pub async fn holder_process_main() {
    let (Ok(urls), Ok(keys)) = (std::env::var(CHILD_URLS), std::env::var(CHILD_KEYS)) else {
        return;
    };
    let builder = LockManager::builder().name(HOLDER_NAME);
    let locks = if std::env::var_os(CHILD_CLUSTER).is_some() {
        builder.cluster(urls.split(',')).await
    } else {
        builder.connect(&urls).await
    }
    .expect("the holder connects");
    for key in keys.split(',') {
        let options = LockOptions::new()
            .ttl(HOLDER_TTL)
            .label(HOLDER_LABEL)
            .fenced(true);
        let guard = locks.acquire(key, options).await.expect("the key is free");
        let token = guard.fencing_token().await.expect("a fencing token");
        println!("HOLDING {key} {token}");
        tokio::spawn(async move {
            guard.lost().await;
            println!("LOST {}", guard.key());
        });
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// A holder process; killed when dropped.
#[derive(Debug)]
pub struct Holder {
    child: Child,
    lines: Receiver<String>,
    /// Every line it printed so far.
    pub seen: Vec<String>,
}

impl Holder {
    /// Starts `test` of this test binary (which must call
    /// [`holder_process_main`]) holding `keys` on the server at `url`, or on
    /// the cluster of the comma-separated `url`s if `cluster`; returns once
    /// it holds them all, with its fencing tokens in the order of `keys`.
    pub fn start(test: &str, urls: &str, keys: &[&str], cluster: bool) -> (Holder, Vec<u64>) {
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args(["--exact", test, "--ignored", "--nocapture", "--quiet"])
            .env(CHILD_URLS, urls)
            .env(CHILD_KEYS, keys.join(","))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if cluster {
            command.env(CHILD_CLUSTER, "1");
        }
        let mut child = command.spawn().expect("start the holder process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let mut holder = Holder {
            child,
            lines,
            seen: Vec::new(),
        };
        let tokens = keys
            .iter()
            .map(|key| {
                let line = holder.expect_line(&format!("HOLDING {key} "));
                line.rsplit(' ')
                    .next()
                    .and_then(|token| token.parse().ok())
                    .expect("a fencing token")
            })
            .collect();
        (holder, tokens)
    }

    /// The holder's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line it printed so far, without waiting for more.
    pub fn printed(&mut self) -> &[String] {
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }

    /// Waits up to [`PATIENCE`] for a line starting with `prefix`; panics
    /// with every line seen if none comes.
    #[track_caller]
    pub fn expect_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
        panic!(
            "the holder never printed `{prefix}…`; it printed {:#?}",
            self.seen
        );
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
