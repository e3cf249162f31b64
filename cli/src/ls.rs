//! `dlock ls`: the held locks of every kind matching a glob, one line each.

use std::time::{Duration, SystemTime};

use leasehold::{Holder, LockManager};

use crate::failure::Failure;
use crate::format;
use crate::locks::{self, HeldInfo, HeldJson, Kind};

/// Column headings of the table.
const HEADINGS: [&str; COLUMNS] = [
    "KEY", "KIND", "HOLDERS", "MANAGER", "HOST", "PID", "LABEL", "HELD FOR", "TTL LEFT", "FENCE",
    "WAITERS",
];

/// Columns of the table.
const COLUMNS: usize = 11;

/// Lists the held locks of every kind matching `pattern` as a table, or as
/// a JSON array.
pub async fn run(manager: &LockManager, pattern: &str, json: bool) -> Result<(), Failure> {
    let (held, _) = locks::held_all(manager, pattern, usize::MAX).await?;
    let now = SystemTime::now();
    if json {
        let all: Vec<HeldJson> = held.iter().map(|info| HeldJson::new(info, now)).collect();
        return locks::print_json(&all);
    }
    if held.is_empty() {
        println!("no held lock matches `{pattern}`");
        return Ok(());
    }
    let rows: Vec<[String; COLUMNS]> = held.iter().map(|info| Line::of(info).row(now)).collect();
    print!("{}", table(&rows));
    Ok(())
}

/// What one line says about a held lock of any kind: of several holders
/// (a read/write lock's writer and readers, a semaphore's permits), the one
/// shown is the writer, else the one whose lease ends first.
struct Line<'a> {
    /// The key, without namespace.
    key: &'a str,
    /// Which of the key's locks.
    kind: Kind,
    /// How many hold it.
    holders: usize,
    /// The holder shown, if its token names it.
    shown: Option<&'a Holder>,
    /// The shown holder's lease left.
    remaining: Option<Duration>,
    /// The fencing counter (a read/write lock's: its writers'); `None` for a
    /// semaphore, which has none, or when none was issued.
    fence: Option<u64>,
    /// Waiters recorded in the backend (a read/write lock's: its waiting
    /// writers); `None` for a semaphore, whose waiters are not recorded.
    waiters: Option<usize>,
}

impl<'a> Line<'a> {
    /// The line of `held`.
    fn of(held: &'a HeldInfo) -> Self {
        let (shown, remaining) = held.shown();
        Line {
            key: held.key(),
            kind: held.kind(),
            holders: held.holders(),
            shown,
            remaining,
            fence: held.fence(),
            waiters: held.waiters(),
        }
    }

    /// The cells of this line, as seen at `now`.
    fn row(&self, now: SystemTime) -> [String; COLUMNS] {
        let unknown = || "-".to_owned();
        let holder = self.shown;
        [
            self.key.to_owned(),
            self.kind.name().to_owned(),
            self.holders.to_string(),
            holder.map_or_else(unknown, |holder| holder.manager.clone()),
            holder.map_or_else(unknown, |holder| holder.host.clone()),
            holder.map_or_else(unknown, |holder| holder.pid.to_string()),
            holder
                .and_then(|holder| holder.label.clone())
                .unwrap_or_else(unknown),
            holder.map_or_else(unknown, |holder| {
                format::duration(format::since(holder.acquired_at, now))
            }),
            self.remaining.map_or_else(unknown, format::duration),
            self.fence
                .map_or_else(unknown, |counter| counter.to_string()),
            self.waiters
                .map_or_else(unknown, |waiters| waiters.to_string()),
        ]
    }
}

/// `rows` under the headings, columns padded to their widest cell.
fn table(rows: &[[String; COLUMNS]]) -> String {
    let mut widths = HEADINGS.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let headings = HEADINGS.map(str::to_owned);
    let mut text = String::new();
    for row in std::iter::once(&headings).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn columns_line_up_under_their_headings() {
        let row = |key: &str, kind: &str| {
            [
                key,
                kind,
                "1",
                "orders-api",
                "web-7",
                "4242",
                "shop::buy",
                "3.0s",
                "27.0s",
                "17",
                "2",
            ]
            .map(str::to_owned)
        };
        let text = table(&[
            row("stock:42", "lock"),
            row("a-much-longer-key:1", "semaphore"),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = lines[0].find("MANAGER").unwrap();
        assert_eq!(lines[1].find("orders-api"), Some(column));
        assert_eq!(lines[2].find("orders-api"), Some(column));
    }
}
