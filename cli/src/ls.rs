//! `dlock ls`: the held locks matching a glob, one line each.

use std::time::SystemTime;

use distributed_lock::{LockInfo, LockManager};

use crate::failure::Failure;
use crate::format;
use crate::locks::{self, LockJson};

/// Column headings of the table.
const HEADINGS: [&str; 9] = [
    "KEY", "MANAGER", "HOST", "PID", "LABEL", "HELD FOR", "TTL LEFT", "FENCE", "WAITERS",
];

/// Lists the held locks matching `pattern` as a table, or as a JSON array.
pub async fn run(manager: &LockManager, pattern: &str, json: bool) -> Result<(), Failure> {
    let (held, _) = locks::held(manager, pattern, usize::MAX).await?;
    let now = SystemTime::now();
    if json {
        let all: Vec<LockJson> = held.iter().map(|info| LockJson::new(info, now)).collect();
        return locks::print_json(&all);
    }
    if held.is_empty() {
        println!("no held lock matches `{pattern}`");
        return Ok(());
    }
    let rows: Vec<[String; 9]> = held.iter().map(|info| row(info, now)).collect();
    print!("{}", table(&rows));
    Ok(())
}

/// The cells of `info`'s line, as seen at `now`.
fn row(info: &LockInfo, now: SystemTime) -> [String; 9] {
    let unknown = || "-".to_owned();
    let holder = info.holder.as_ref();
    [
        info.key.clone(),
        holder.map_or_else(unknown, |holder| holder.manager.clone()),
        holder.map_or_else(unknown, |holder| holder.host.clone()),
        holder.map_or_else(unknown, |holder| holder.pid.to_string()),
        holder
            .and_then(|holder| holder.label.clone())
            .unwrap_or_else(unknown),
        holder.map_or_else(unknown, |holder| {
            format::duration(format::since(holder.acquired_at, now))
        }),
        info.remaining.map_or_else(unknown, format::duration),
        info.fencing_counter
            .map_or_else(unknown, |counter| counter.to_string()),
        info.queued_count.to_string(),
    ]
}

/// `rows` under the headings, columns padded to their widest cell.
fn table(rows: &[[String; 9]]) -> String {
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
        let row = |key: &str| {
            [
                key,
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
        let text = table(&[row("stock:42"), row("a-much-longer-key:1")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = lines[0].find("MANAGER").unwrap();
        assert_eq!(lines[1].find("orders-api"), Some(column));
        assert_eq!(lines[2].find("orders-api"), Some(column));
    }
}
