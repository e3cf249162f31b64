//! The server programs the tests start that no package provides (Valkey
//! 9.1 and Redis 8.6): each path is the one its variable names, else what
//! its `scripts/ensure-*` prints, which builds it the first time on a
//! machine. The scripts start at once, beside the cargo build; only the
//! jobs that start servers wait for them.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

/// The variable naming each binary, and the script that prints its path.
const BUILT: [(&str, &str); 2] = [
    ("LEASEHOLD_VALKEY_SERVER", "ensure-valkey"),
    ("LEASEHOLD_REDIS8_SERVER", "ensure-redis8"),
];

/// Every built server of the tests.
#[derive(Debug)]
pub struct Servers(Vec<Built>);

#[derive(Debug)]
struct Built {
    variable: &'static str,
    script: &'static str,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Building(Child),
    Ready(String),
    Failed(String),
}

impl Servers {
    /// Starts each script whose variable is unset, in `root`/scripts. Not
    /// niced: on a shared machine a niced build starves and the suite then
    /// waits for it.
    pub fn start(root: &Path) -> Self {
        Self(
            BUILT
                .iter()
                .map(|&(variable, script)| {
                    let state = match std::env::var(variable) {
                        Ok(path) if !path.is_empty() => State::Ready(path),
                        _ => Command::new(root.join("scripts").join(script))
                            .current_dir(root)
                            .stdin(Stdio::null())
                            .stdout(Stdio::piped())
                            .spawn()
                            .map_or_else(
                                |error| {
                                    State::Failed(format!("cannot run scripts/{script}: {error}"))
                                },
                                State::Building,
                            ),
                    };
                    Built {
                        variable,
                        script,
                        state: Mutex::new(state),
                    }
                })
                .collect(),
        )
    }

    /// No server: for jobs that start none.
    pub fn none() -> Self {
        Self(Vec::new())
    }

    /// Each variable with its server's path, waiting for the scripts still
    /// building; an error says which script failed.
    pub fn variables(&self) -> Result<Vec<(String, String)>, String> {
        self.0
            .iter()
            .map(|built| Ok((built.variable.to_owned(), built.path()?)))
            .collect()
    }
}

impl Built {
    fn path(&self) -> Result<String, String> {
        let mut state = self.state.lock().map_err(|_| "a job panicked".to_owned())?;
        if let State::Building(child) = &mut *state {
            let started = Instant::now();
            let finished = child.stdout.take().map(std::io::read_to_string);
            let status = child.wait();
            let printed = match finished {
                Some(Ok(text)) => text.trim().to_owned(),
                _ => String::new(),
            };
            *state = match status {
                Ok(status) if status.success() && !printed.is_empty() => State::Ready(printed),
                _ => State::Failed(format!(
                    "scripts/{} failed ({status:?}), so the tests have no server for {}; its message is above the test results",
                    self.script, self.variable
                )),
            };
            let waited = started.elapsed().as_secs();
            if waited >= 1 {
                eprintln!(
                    "xtask: the test binaries waited {waited} s for scripts/{}",
                    self.script
                );
            }
        }
        match &*state {
            State::Ready(path) => Ok(path.clone()),
            State::Failed(message) => Err(message.clone()),
            State::Building(_) => Err(format!("scripts/{} still building", self.script)),
        }
    }
}
