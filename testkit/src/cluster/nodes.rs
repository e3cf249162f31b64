//! Parsing `CLUSTER NODES`: the nodes one cluster node knows, their roles and
//! the slots each primary serves, as that node sees them.

use std::ops::RangeInclusive;

use super::slot::CLUSTER_SLOTS;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The node's 40-character id.
    pub(crate) id: String,
    /// Its client port.
    pub(crate) port: u16,
    /// Whether this line describes the node that answered.
    pub(crate) myself: bool,
    /// Whether it is a primary (flag `master`).
    pub(crate) primary: bool,
    /// Whether it is still in the handshake that `CLUSTER MEET` starts.
    pub(crate) handshake: bool,
    /// The id of its primary, for a replica.
    pub(crate) primary_id: Option<String>,
    /// The slots it serves; ranges being imported or migrated are left out.
    pub(crate) slots: Vec<RangeInclusive<u16>>,
}

/// Who serves each slot: disjoint ranges with their primary's id, by start.
pub(crate) type SlotOwners = Vec<(RangeInclusive<u16>, String)>;

/// Parses a whole `CLUSTER NODES` reply.
pub(crate) fn parse(text: &str) -> Result<Vec<Entry>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            parse_line(line).ok_or_else(|| format!("unexpected CLUSTER NODES line {line:?}"))
        })
        .collect()
}

/// The line of the node that answered.
pub(crate) fn myself(entries: &[Entry]) -> Result<&Entry, String> {
    entries
        .iter()
        .find(|entry| entry.myself)
        .ok_or_else(|| "CLUSTER NODES has no `myself` line".to_owned())
}

/// The owners of every slot, checked to cover all 16384 slots exactly once.
pub(crate) fn slot_owners(entries: &[Entry]) -> Result<SlotOwners, String> {
    let mut owners: SlotOwners = entries
        .iter()
        .filter(|entry| entry.primary)
        .flat_map(|entry| {
            entry
                .slots
                .iter()
                .map(|range| (range.clone(), entry.id.clone()))
        })
        .collect();
    owners.sort_by_key(|(range, _)| *range.start());
    let mut next: u32 = 0;
    for (range, _) in &owners {
        if u32::from(*range.start()) != next {
            return Err(format!("slot {next} is served by no primary, or by two"));
        }
        next = u32::from(*range.end()) + 1;
    }
    if next != u32::from(CLUSTER_SLOTS) {
        return Err(format!("slot {next} is served by no primary"));
    }
    Ok(owners)
}

/// `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...`
fn parse_line(line: &str) -> Option<Entry> {
    let mut fields = line.split_whitespace();
    let id = fields.next()?.to_owned();
    let address = fields.next()?;
    let (host_port, _bus) = address.split_once('@')?;
    let port = host_port.rsplit_once(':')?.1.parse().ok()?;
    let flags: Vec<&str> = fields.next()?.split(',').collect();
    let primary_id = Some(fields.next()?)
        .filter(|id| *id != "-")
        .map(str::to_owned);
    let slots = fields
        .skip(4)
        .filter(|token| !token.starts_with('['))
        .map(parse_range)
        .collect::<Option<_>>()?;
    Some(Entry {
        id,
        port,
        myself: flags.contains(&"myself"),
        primary: flags.contains(&"master"),
        handshake: flags.contains(&"handshake"),
        primary_id,
        slots,
    })
}

/// `5461` or `0-5460`.
fn parse_range(token: &str) -> Option<RangeInclusive<u16>> {
    let (start, end) = token.split_once('-').unwrap_or((token, token));
    let (start, end) = (start.parse().ok()?, end.parse().ok()?);
    (start <= end && end < CLUSTER_SLOTS).then_some(start..=end)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: &str = "\
aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-bbb]\n\
bbb 127.0.0.1:7001@17001,host master - 0 1 2 connected 5461-10922\n\
ccc 127.0.0.1:7002@17002 master,fail - 0 1 3 connected 10923-16382 16383\n\
ddd 127.0.0.1:7003@17003 slave aaa 0 1 1 connected\n\
eee :7004@17004 handshake,noaddr - 0 0 0 disconnected\n";

    #[test]
    fn parses_roles_ports_and_slots() {
        let entries = parse(VIEW).unwrap();
        assert_eq!(entries.len(), 5);
        let me = myself(&entries).unwrap();
        assert_eq!((me.id.as_str(), me.port, me.primary), ("aaa", 7000, true));
        assert_eq!(me.slots, vec![0..=5460]);
        assert_eq!(entries[1].port, 7001);
        assert_eq!(entries[2].slots, vec![10923..=16382, 16383..=16383]);
        assert_eq!(entries[3].primary_id.as_deref(), Some("aaa"));
        assert!(!entries[3].primary);
        assert!(entries[4].handshake);
        assert_eq!(entries[4].port, 7004);
    }

    #[test]
    fn slot_owners_cover_every_slot_once() {
        let owners = slot_owners(&parse(VIEW).unwrap()).unwrap();
        let ids: Vec<&str> = owners.iter().map(|(_, id)| id.as_str()).collect();
        assert_eq!(ids, ["aaa", "bbb", "ccc", "ccc"]);
        let partial = parse(&VIEW.replace(" 16383\n", "\n")).unwrap();
        assert!(slot_owners(&partial).unwrap_err().contains("16383"));
        let overlapping = parse(&VIEW.replace("0-5460", "0-5461")).unwrap();
        assert!(slot_owners(&overlapping).is_err());
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(parse("aaa 127.0.0.1:7000 master - 0 0 1 connected").is_err());
        assert!(parse("aaa 127.0.0.1:7000@1 master - 0 0 1 connected 5-4").is_err());
        assert!(parse("aaa 127.0.0.1:7000@1 master - 0 0 1 connected 16384").is_err());
        assert!(parse("aaa").is_err());
    }
}
