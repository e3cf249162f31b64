//! The live view's event loop: refresh every second, redraw, quit on `q`,
//! Esc or Ctrl-C. The terminal is restored on every way out.

use std::time::{Duration, Instant};

use leasehold::LockManager;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::DefaultTerminal;

use super::render::render;
use super::snapshot::{Collector, Snapshot};
use crate::failure::Failure;

/// How often the view is refreshed.
const REFRESH: Duration = Duration::from_secs(1);

/// Runs the live view of the locks matching `pattern` until the user quits.
/// A refresh that fails keeps the last data on screen with the error; a
/// first refresh that fails ends the view with that error.
pub async fn live(manager: &LockManager, title: &str, pattern: &str) -> Result<(), Failure> {
    let mut collector = Collector::new(title, pattern);
    let first = collector.collect(manager).await?;
    let mut terminal = ratatui::try_init()?;
    let result = run(&mut terminal, manager, &mut collector, first).await;
    ratatui::restore();
    result
}

/// Draws, waits for a key until the next refresh, and refreshes.
async fn run(
    terminal: &mut DefaultTerminal,
    manager: &LockManager,
    collector: &mut Collector,
    mut shown: Snapshot,
) -> Result<(), Failure> {
    loop {
        terminal.draw(|frame| render(&shown, frame))?;
        let next = Instant::now() + REFRESH;
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if quit_pressed(left).await? {
                return Ok(());
            }
        }
        shown = match collector.collect(manager).await {
            Ok(snapshot) => snapshot,
            Err(err) => Snapshot {
                problem: Some(err.to_string()),
                ..shown
            },
        };
    }
}

/// Waits up to `wait` for a terminal event; true if it asks to quit. Runs
/// on the blocking pool, so the runtime keeps serving the connections.
async fn quit_pressed(wait: Duration) -> Result<bool, Failure> {
    let polled = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
        if !event::poll(wait)? {
            return Ok(false);
        }
        Ok(matches!(event::read()?, Event::Key(key) if is_quit(key)))
    })
    .await
    .map_err(|err| Failure::Io(std::io::Error::other(err)))?;
    Ok(polled?)
}

/// Whether `key` is `q`, Esc or Ctrl-C.
fn is_quit(key: KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}
