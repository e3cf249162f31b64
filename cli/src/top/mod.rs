//! `dlock top`: a live view of the hottest locks, refreshed every second.
//!
//! `snapshot` collects what is shown and notices holders that changed or
//! vanished between refreshes, `render` draws a snapshot (a pure function,
//! tested on a fixed-size buffer), and `app` runs the terminal's event loop.

mod app;
mod render;
mod snapshot;

use leasehold::LockManager;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

pub use app::live;

use crate::failure::Failure;
use render::{height_for, render, text_of};
use snapshot::Collector;

/// Size of the frame `--once` prints.
const ONCE_WIDTH: u16 = 120;
/// Most lines of the frame `--once` prints.
const ONCE_MOST_LINES: u16 = 200;

/// Collects one snapshot, renders it 120 columns wide and as high as its
/// locks need (at most 200 lines), and prints it as text (trailing blanks
/// trimmed).
pub async fn once(manager: &LockManager, title: &str, pattern: &str) -> Result<(), Failure> {
    let snapshot = Collector::new(title, pattern).collect(manager).await?;
    // A test backend cannot fail: its errors are `Infallible`.
    let Ok(mut terminal) = Terminal::new(TestBackend::new(
        ONCE_WIDTH,
        height_for(&snapshot, ONCE_MOST_LINES),
    ));
    let Ok(_) = terminal.draw(|frame| render(&snapshot, frame));
    print!("{}", text_of(terminal.backend().buffer()));
    Ok(())
}
