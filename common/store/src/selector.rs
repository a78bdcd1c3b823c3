//! A label selector (`domain::labels::Selector`) as a SQL predicate on
//! `jobs.spec->'labels'`, every key and value a bound parameter. `=` and
//! `in` terms are containment tests (`@>`), which the GIN index
//! `jobs_live_labels` (migration V9) answers; the other terms filter the
//! rows the rest of the statement selects. A job without labels has no
//! `labels` key at all (NULL), so the negated terms use `IS NOT TRUE`.
//! The API's listings and bulk actions and the alert rules select jobs
//! with it.

use serde_json::{Value, json};
use tokio_postgres::types::ToSql;

use domain::labels::{Op, Selector};

/// The SQL of a selector and the parameters it binds.
pub struct Predicate {
    /// `TRUE` for the empty selector.
    pub sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Predicate {
    /// The predicate of `selector`, numbering its parameters from `$first`
    /// (the statement's own come before).
    pub fn new(selector: &Selector, first: usize) -> Predicate {
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        let mut terms = Vec::new();
        for r in &selector.requirements {
            let n = first + params.len();
            let contains = |key: &str, value: &str| json!({ key: value });
            let (sql, param): (String, Box<dyn ToSql + Sync + Send>) = match &r.op {
                Op::Eq(v) => (format!("(spec->'labels') @> ${n}::jsonb"), Box::new(contains(&r.key, v))),
                Op::NotEq(v) => {
                    (format!("((spec->'labels') @> ${n}::jsonb) IS NOT TRUE"), Box::new(contains(&r.key, v)))
                }
                // A bitmap scan of the GIN index runs once per array element.
                Op::In(set) => (
                    format!("(spec->'labels') @> ANY(${n}::jsonb[])"),
                    Box::new(set.iter().map(|v| contains(&r.key, v)).collect::<Vec<Value>>()),
                ),
                Op::NotIn(set) => (
                    format!("((spec->'labels') @> ANY(${n}::jsonb[])) IS NOT TRUE"),
                    Box::new(set.iter().map(|v| contains(&r.key, v)).collect::<Vec<Value>>()),
                ),
                Op::Exists => (format!("(spec->'labels') ? ${n}::text"), Box::new(r.key.clone())),
                Op::NotExists => (format!("((spec->'labels') ? ${n}::text) IS NOT TRUE"), Box::new(r.key.clone())),
            };
            terms.push(sql);
            params.push(param);
        }
        let sql = if terms.is_empty() { "TRUE".to_owned() } else { terms.join(" AND ") };
        Predicate { sql, params }
    }

    /// The parameters, in order, to append to the statement's own.
    pub fn params(&self) -> impl Iterator<Item = &(dyn ToSql + Sync)> {
        self.params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync))
    }
}
