//! Jobs run side by side: a test binary or a cargo command, its output to
//! a log file, at most a fixed number at once, in the order submitted.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::build;
use crate::servers::Servers;

/// One thing to run: a test binary, or a cargo command.
#[derive(Debug, Clone)]
pub struct Job {
    /// What the report calls it, e.g. `suite (test)`.
    pub name: String,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Variables set on top of this process's environment.
    pub env: Vec<(String, String)>,
    /// Whether it starts the built servers: it waits for them and gets
    /// their variables.
    pub needs_servers: bool,
}

/// How a job ended.
#[derive(Debug)]
pub struct Outcome {
    /// The job.
    pub job: Job,
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit code, `None` when a signal ended it or it did not start.
    pub code: Option<i32>,
    /// Its wall time, waiting for the servers included.
    pub seconds: f64,
    /// Its output and error, interleaved.
    pub log: PathBuf,
}

type Task = Box<dyn FnOnce() + Send>;

/// A fixed number of threads that run the submitted jobs in order.
#[derive(Debug)]
pub struct Pool {
    sender: Option<Sender<Task>>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `size` threads.
    pub fn new(size: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Task>();
        let receiver = Arc::new(Mutex::new(receiver));
        let workers = (0..size)
            .map(|_| {
                let receiver = Arc::clone(&receiver);
                thread::spawn(move || loop {
                    let next = receiver.lock().map(|receiver| receiver.recv());
                    match next {
                        Ok(Ok(task)) => task(),
                        _ => return,
                    }
                })
            })
            .collect();
        Self {
            sender: Some(sender),
            workers,
        }
    }

    /// Queues `job`, its output to `log`; the receiver gets its outcome.
    pub fn submit(&self, job: Job, log: PathBuf, servers: &Arc<Servers>) -> Receiver<Outcome> {
        let (done, outcome) = mpsc::channel();
        let servers = Arc::clone(servers);
        let task: Task = Box::new(move || {
            // The receiver outlives the pool's work unless the run is over.
            let _ = done.send(run(job, log, &servers));
        });
        if let Some(sender) = &self.sender {
            // The workers hold the receiver until the pool is dropped.
            let _ = sender.send(task);
        }
        outcome
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.sender = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// Runs `job` to its end, its output and error to `log`.
fn run(job: Job, log: PathBuf, servers: &Servers) -> Outcome {
    let started = Instant::now();
    let (success, code) = match spawn_and_wait(&job, &log, servers) {
        Ok(status) => (status.success(), status.code()),
        Err(message) => {
            let _ = std::fs::write(&log, format!("xtask: not run: {message}\n"));
            (false, None)
        }
    };
    Outcome {
        job,
        success,
        code,
        seconds: started.elapsed().as_secs_f64(),
        log,
    }
}

fn spawn_and_wait(
    job: &Job,
    log: &PathBuf,
    servers: &Servers,
) -> Result<std::process::ExitStatus, String> {
    let mut env = job.env.clone();
    if job.needs_servers {
        env.extend(servers.variables()?);
    }
    let out =
        File::create(log).map_err(|error| format!("cannot write {}: {error}", log.display()))?;
    let err = out.try_clone().map_err(|error| error.to_string())?;
    let (program, arguments) = job.argv.split_first().ok_or("an empty command")?;
    build::without_run_env(&mut Command::new(program))
        .args(arguments)
        .current_dir(&job.cwd)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|error| format!("cannot run {program}: {error}"))
}
