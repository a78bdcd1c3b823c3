//! Rendezvous (highest-random-weight) ownership: the `rf` live nodes with the
//! highest siphash of (node id, job id) own a job. Pure and deterministic, so
//! every node computes the same owners from the same live set, and a join or
//! leave moves only the jobs whose top `rf` changed.

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
