//! Draws a [`Snapshot`]: a pure function of the snapshot and the frame's
//! size, so a test can draw one on a fixed-size buffer.

use std::time::Duration;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, List, ListItem, Paragraph, Row, Table};
use ratatui::Frame;

use super::snapshot::{Change, ChangeKind, HeldLock, Snapshot};
use crate::format;

/// The key column's share of the width left by the fixed columns.
const KEY_WIDTH: Constraint = Constraint::Fill(4);
/// The holder column's share: a little more than the key's, for `name pid N`.
const HOLDER_WIDTH: Constraint = Constraint::Fill(5);

/// Lines of the header.
const HEADER_HEIGHT: u16 = 2;
/// Least height of the tables: borders, heading and three rows.
const MIN_TABLES_HEIGHT: u16 = 6;
/// Height of the list of changes: borders and seven of them.
const CHANGES_HEIGHT: u16 = 9;

/// The height at which every held lock of `snapshot` has its row (up to
/// `most` lines in all): for a frame printed once.
pub fn height_for(snapshot: &Snapshot, most: u16) -> u16 {
    let rows = u16::try_from(snapshot.locks.len()).unwrap_or(u16::MAX);
    let tables = rows.saturating_add(3).max(MIN_TABLES_HEIGHT);
    (HEADER_HEIGHT + CHANGES_HEIGHT)
        .saturating_add(tables)
        .min(most)
}

/// Draws `snapshot` on `frame`: a header, the keys with the most queued
/// waiters beside the longest holds, and the latest changes of holder.
pub fn render(snapshot: &Snapshot, frame: &mut Frame<'_>) {
    let [header, tables, changes] = Layout::vertical([
        Constraint::Length(HEADER_HEIGHT),
        Constraint::Min(MIN_TABLES_HEIGHT),
        Constraint::Length(CHANGES_HEIGHT),
    ])
    .areas(frame.area());
    let [most_waiters, longest_held] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(tables);
    frame.render_widget(header_of(snapshot), header);
    frame.render_widget(most_waiters_of(snapshot), most_waiters);
    frame.render_widget(longest_held_of(snapshot), longest_held);
    frame.render_widget(changes_of(snapshot), changes);
}

/// Two lines: where, what and when; and a failed refresh, if any.
fn header_of(snapshot: &Snapshot) -> Paragraph<'static> {
    let waiters: usize = snapshot.locks.iter().map(|lock| lock.waiters).sum();
    let mut summary = format!(
        "{} held, {waiters} waiters queued, at {} UTC",
        snapshot.locks.len(),
        format::clock(snapshot.taken_at)
    );
    if snapshot.not_inspected > 0 {
        summary.push_str(&format!(" ({} more not inspected)", snapshot.not_inspected));
    }
    let second = match &snapshot.problem {
        Some(problem) => Line::styled(
            format!("refresh failed, showing older data: {problem}"),
            Style::new().fg(Color::Red),
        ),
        None => Line::raw(format!("{summary}   q or Esc quits")),
    };
    Paragraph::new(vec![
        Line::styled(
            format!("dlock top | {} | keys {}", snapshot.title, snapshot.pattern),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        second,
    ])
}

/// Keys with queued waiters, most first (ties: held longest first).
fn most_waiters_of(snapshot: &Snapshot) -> Table<'static> {
    let mut hot: Vec<&HeldLock> = snapshot
        .locks
        .iter()
        .filter(|lock| lock.waiters > 0)
        .collect();
    hot.sort_by(|a, b| b.waiters.cmp(&a.waiters).then(b.held_for.cmp(&a.held_for)));
    let rows = hot.iter().map(|lock| {
        Row::new([
            lock.shown_key(),
            lock.waiters.to_string(),
            held_for(lock),
            holder_of(lock),
        ])
    });
    Table::new(
        rows,
        [
            KEY_WIDTH,
            Constraint::Length(7),
            Constraint::Length(8),
            HOLDER_WIDTH,
        ],
    )
    .header(heading(["KEY", "WAITERS", "HELD FOR", "HOLDER"]))
    .block(titled("Most waiters"))
}

/// Every held key, held longest first.
fn longest_held_of(snapshot: &Snapshot) -> Table<'static> {
    let mut long: Vec<&HeldLock> = snapshot.locks.iter().collect();
    long.sort_by_key(|lock| std::cmp::Reverse(lock.held_for));
    let rows = long.iter().map(|lock| {
        Row::new([
            lock.shown_key(),
            held_for(lock),
            lock.remaining
                .map_or_else(|| "-".to_owned(), format::duration),
            holder_of(lock),
        ])
    });
    Table::new(
        rows,
        [
            KEY_WIDTH,
            Constraint::Length(8),
            Constraint::Length(8),
            HOLDER_WIDTH,
        ],
    )
    .header(heading(["KEY", "HELD FOR", "TTL LEFT", "HOLDER"]))
    .block(titled("Longest held"))
}

/// The latest changes of holder, newest first.
fn changes_of(snapshot: &Snapshot) -> List<'static> {
    let items: Vec<ListItem<'static>> = if snapshot.changes.is_empty() {
        vec![ListItem::new("none seen since dlock top started")]
    } else {
        snapshot
            .changes
            .iter()
            .map(|change| {
                let ago = format::since(change.seen_at, snapshot.taken_at);
                ListItem::new(describe(change, ago))
            })
            .collect()
    };
    List::new(items).block(titled(
        "Evictions and lost holders (changes between refreshes)",
    ))
}

/// One change, seen `ago`.
fn describe(change: &Change, ago: Duration) -> String {
    let before = format::holder(change.before.as_ref());
    let what = match &change.kind {
        ChangeKind::HolderChanged { after } => format!(
            "holder changed before its ttl: {before} -> {}",
            format::holder(after.as_ref())
        ),
        ChangeKind::FreedEarly => format!("freed before its ttl (released or evicted): {before}"),
        ChangeKind::Expired => format!("lease ran out, holder stopped renewing: {before}"),
        ChangeKind::HoldEnded => {
            format!("hold_at_least ended as planned (released earlier): {before}")
        }
    };
    format!("{:>7} ago  {}  {what}", format::duration(ago), change.key)
}

/// `lock`'s holder as `manager pid N`, or `-`.
fn holder_of(lock: &HeldLock) -> String {
    lock.holder.as_ref().map_or_else(
        || "-".to_owned(),
        |holder| format!("{} pid {}", holder.manager, holder.pid),
    )
}

/// How long `lock` has been held, or `-`.
fn held_for(lock: &HeldLock) -> String {
    lock.held_for
        .map_or_else(|| "-".to_owned(), format::duration)
}

/// A bold header row.
fn heading(cells: [&'static str; 4]) -> Row<'static> {
    Row::new(cells).style(Style::new().add_modifier(Modifier::BOLD))
}

/// A bordered block titled `title`.
fn titled(title: &'static str) -> Block<'static> {
    Block::new().borders(Borders::ALL).title(title)
}

/// The characters of `buffer`, one line per row, trailing blanks trimmed.
pub(super) fn text_of(buffer: &Buffer) -> String {
    let area = buffer.area;
    let mut text = String::new();
    for y in area.top()..area.bottom() {
        let line: String = (area.left()..area.right())
            .map(|x| buffer[(x, y)].symbol())
            .collect();
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use leasehold::Holder;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::render;
    use super::text_of;
    use crate::locks::Kind;
    use crate::top::snapshot::{Change, ChangeKind, HeldLock, Snapshot};

    fn holder(manager: &str, pid: u32) -> Holder {
        let token = format!("{}|0|30000|{pid}|web-7|{manager}|shop::buy", "0".repeat(32));
        Holder::from_token(&token).expect("a well-formed owner token")
    }

    fn held(key: &str, manager: &str, held_secs: u64, waiters: usize) -> HeldLock {
        HeldLock {
            key: key.to_owned(),
            kind: Kind::Lock,
            holder: Some(holder(manager, 4242)),
            held_for: Some(Duration::from_secs(held_secs)),
            remaining: Some(Duration::from_secs(25)),
            waiters,
            released: false,
        }
    }

    fn snapshot() -> Snapshot {
        let taken_at = SystemTime::UNIX_EPOCH + Duration::from_secs(3_600);
        Snapshot {
            title: "redis://127.0.0.1:6379, namespace lock:".to_owned(),
            pattern: "*".to_owned(),
            taken_at,
            locks: vec![
                held("cold:1", "billing", 7_200, 0),
                held("stock:42", "orders-api", 65, 7),
                held("warm:3", "orders-api", 5, 2),
            ],
            not_inspected: 0,
            changes: vec![Change {
                seen_at: taken_at - Duration::from_secs(3),
                key: "job:nightly".to_owned(),
                before: Some(holder("reports", 77)),
                kind: ChangeKind::FreedEarly,
            }],
            problem: None,
        }
    }

    fn drawn(snapshot: &Snapshot, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| render(snapshot, frame)).unwrap();
        text_of(terminal.backend().buffer())
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_hottest_key_heads_the_waiters_table_with_its_count() {
        let lines = drawn(&snapshot(), 120, 30);
        let heading = lines
            .iter()
            .position(|line| line.contains("Most waiters"))
            .expect("the waiters table is drawn");
        let first = &lines[heading + 2];
        assert!(first.contains("stock:42"), "{lines:#?}");
        assert!(first.contains(" 7 "), "{lines:#?}");
        assert!(lines[heading + 3].contains("warm:3"), "{lines:#?}");
        assert!(
            !lines
                .iter()
                .any(|line| line[..60.min(line.len())].contains("cold:1")),
            "a key without waiters is not among the hottest: {lines:#?}"
        );
    }

    #[test]
    fn the_longest_hold_heads_its_table_and_changes_are_listed() {
        let lines = drawn(&snapshot(), 120, 30);
        let heading = lines
            .iter()
            .position(|line| line.contains("Longest held"))
            .expect("the longest-held table is drawn");
        assert!(lines[heading + 2].contains("cold:1"), "{lines:#?}");
        assert!(lines[heading + 2].contains("2h00m"), "{lines:#?}");
        let text = lines.join("\n");
        assert!(
            text.contains("3 held, 9 waiters queued, at 01:00:00 UTC"),
            "{text}"
        );
        assert!(
            text.contains("3.0s ago  job:nightly  freed before its ttl"),
            "{text}"
        );
        assert!(text.contains("reports (pid 77 on web-7)"), "{text}");
    }

    #[test]
    fn read_write_locks_and_semaphores_are_shown_with_their_kind() {
        let mut with_shared = snapshot();
        with_shared.locks.push(HeldLock {
            kind: Kind::Rw,
            ..held("doc", "catalog-svc", 9_000, 1)
        });
        with_shared.locks.push(HeldLock {
            kind: Kind::Semaphore,
            ..held("api", "payments", 8_000, 0)
        });
        let lines = drawn(&with_shared, 120, 30);
        let heading = lines
            .iter()
            .position(|line| line.contains("Longest held"))
            .expect("the longest-held table is drawn");
        assert!(lines[heading + 2].contains("doc (rw)"), "{lines:#?}");
        let text = lines.join("\n");
        assert!(text.contains("api (semaphore)"), "{text}");
        assert!(text.contains("5 held, 10 waiters queued"), "{text}");
    }

    #[test]
    fn a_tiny_terminal_is_drawn_without_panicking() {
        for (width, height) in [(1, 1), (10, 3), (40, 10)] {
            drawn(&snapshot(), width, height);
        }
    }
}
