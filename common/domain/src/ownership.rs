//! Rendezvous (highest-random-weight) ownership: the `rf` live nodes with the
//! highest siphash of (node id, job id) own a job. Pure and deterministic, so
//! every node computes the same owners from the same live set, and a join or
//! leave moves only the jobs whose top `rf` changed. The scheduler decides
//! what it fires with it; the API answers "who owns this job now" with the
//! same function, so the two cannot disagree.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;
use uuid::Uuid;

/// Fixed keys: every node and every version must hash identically.
const KEY0: u64 = 0x6372_6f6e_7368_6172;
const KEY1: u64 = 0x6465_6e64_657a_766f;

pub fn weight(node_id: &str, job_id: Uuid) -> u64 {
    let mut h = SipHasher13::new_with_keys(KEY0, KEY1);
    h.write(node_id.as_bytes());
    // Separator: ("ab", "c…") and ("a", "bc…") must not collide.
    h.write_u8(0xff);
    h.write(job_id.as_bytes());
    h.finish()
}

/// The owners of `job_id` among `members`, best first.
pub fn owners(job_id: Uuid, members: &[String], rf: usize) -> Vec<&str> {
    let mut scored: Vec<(u64, &str)> = members.iter().map(|m| (weight(m, job_id), m.as_str())).collect();
    // Ties (practically impossible) break on the id so all nodes agree.
    scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(rf).map(|(_, m)| m).collect()
}

/// The replication factor a node uses unless it says otherwise (`REPLICATION_FACTOR`).
pub const DEFAULT_REPLICATION_FACTOR: usize = 2;

/// The field of a node's heartbeat document that carries its replication factor.
pub const HEARTBEAT_REPLICATION_FACTOR: &str = "replication_factor";

/// The replication factor a heartbeat document announces; a node that does
/// not publish one (an older release) uses the default.
pub fn heartbeat_replication_factor(heartbeat: &serde_json::Value) -> usize {
    heartbeat
        .get(HEARTBEAT_REPLICATION_FACTOR)
        .and_then(serde_json::Value::as_u64)
        .filter(|rf| *rf >= 1)
        .map_or(DEFAULT_REPLICATION_FACTOR, |rf| rf as usize)
}

/// The nodes that consider themselves owners of `job_id`, best first: each
/// live node decides with its own replication factor (`members` pairs a
/// node id with it), so while a change of the factor rolls out the answer
/// is what the nodes actually do. With one factor for all, this is
/// [`owners`].
pub fn owners_by_own_factor(job_id: Uuid, members: &[(String, usize)]) -> Vec<String> {
    let ids: Vec<String> = members.iter().map(|(id, _)| id.clone()).collect();
    owners(job_id, &ids, ids.len())
        .into_iter()
        .enumerate()
        .filter(|(rank, id)| members.iter().any(|(m, rf)| m == id && rank < &(*rf).max(1)))
        .map(|(_, id)| id.to_owned())
        .collect()
}

pub fn is_owner(node_id: &str, job_id: Uuid, members: &[String], rf: usize) -> bool {
    if rf >= members.len() {
        return members.iter().any(|m| m == node_id);
    }
    let mine = weight(node_id, job_id);
    // Owner iff fewer than `rf` members beat us: no allocation on the hot path.
    let better = members
        .iter()
        .filter(|m| m.as_str() != node_id)
        .filter(|m| {
            let w = weight(m, job_id);
            w > mine || (w == mine && m.as_str() < node_id)
        })
        .take(rf)
        .count();
    members.iter().any(|m| m == node_id) && better < rf
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn nodes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cronshard-scheduler-{i}")).collect()
    }

    fn jobs(n: u128) -> impl Iterator<Item = Uuid> {
        (0..n).map(|i| Uuid::from_u128(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)))
    }

    #[test]
    fn balanced_within_ten_percent_for_3_to_20_nodes() {
        for n in 3..=20 {
            let members = nodes(n);
            let mut count: HashMap<&str, usize> = HashMap::new();
            for job in jobs(100_000) {
                for o in owners(job, &members, 2) {
                    *count.entry(o).or_default() += 1;
                }
            }
            let expected = 100_000.0 * 2.0 / n as f64;
            for (node, c) in &count {
                let dev = (*c as f64 - expected).abs() / expected;
                assert!(dev <= 0.10, "{n} nodes: {node} owns {c}, expected {expected:.0} (±10%)");
            }
        }
    }

    #[test]
    fn is_owner_agrees_with_owners() {
        let members = nodes(7);
        for job in jobs(5_000) {
            let top = owners(job, &members, 2);
            for m in &members {
                assert_eq!(is_owner(m, job, &members, 2), top.contains(&m.as_str()));
            }
        }
    }

    #[test]
    fn own_factors_agree_with_owners_when_equal_and_follow_each_node_otherwise() {
        let members = nodes(5);
        for job in jobs(500) {
            let same: Vec<(String, usize)> = members.iter().map(|m| (m.clone(), 2)).collect();
            let expected: Vec<String> = owners(job, &members, 2).into_iter().map(str::to_owned).collect();
            assert_eq!(owners_by_own_factor(job, &same), expected);
            // The third-best node with a factor of 3 counts itself in; the
            // second-best with a factor of 1 does not.
            let ranked = owners(job, &members, 5);
            let mixed: Vec<(String, usize)> = members
                .iter()
                .map(|m| {
                    (
                        m.clone(),
                        if m == ranked[2] {
                            3
                        } else if m == ranked[1] {
                            1
                        } else {
                            2
                        },
                    )
                })
                .collect();
            assert_eq!(owners_by_own_factor(job, &mixed), vec![ranked[0].to_owned(), ranked[2].to_owned()]);
        }
    }

    #[test]
    fn heartbeats_without_a_factor_use_the_default() {
        assert_eq!(heartbeat_replication_factor(&serde_json::json!({"node_id": "a"})), 2);
        assert_eq!(heartbeat_replication_factor(&serde_json::json!({"replication_factor": 3})), 3);
        assert_eq!(heartbeat_replication_factor(&serde_json::json!({"replication_factor": 0})), 2);
        assert_eq!(heartbeat_replication_factor(&serde_json::Value::Null), 2);
    }

    proptest! {
        /// A node leaving moves only the jobs it owned; a node joining moves
        /// only the jobs it now owns. Everything else keeps both owners.
        #[test]
        fn membership_change_moves_only_affected_jobs(n in 2usize..12, leave in 0usize..12, seed in any::<u128>()) {
            let before = nodes(n);
            let gone = before[leave % n].clone();
            let after: Vec<String> = before.iter().filter(|m| **m != gone).cloned().collect();
            let joined = "cronshard-scheduler-new".to_owned();
            let mut grown = before.clone();
            grown.push(joined.clone());
            for i in 0..200u128 {
                let job = Uuid::from_u128(seed.wrapping_add(i));
                let old = owners(job, &before, 2);
                let new = owners(job, &after, 2);
                if !old.contains(&gone.as_str()) {
                    prop_assert_eq!(&old, &new);
                } else {
                    // The survivor keeps the job.
                    for o in old.iter().filter(|o| **o != gone) {
                        prop_assert!(new.contains(o));
                    }
                }
                let bigger = owners(job, &grown, 2);
                if !bigger.contains(&joined.as_str()) {
                    prop_assert_eq!(&old, &bigger);
                }
            }
        }
    }
}
