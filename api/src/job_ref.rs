//! How a request names a job in a path: by its id (a UUID), by its key,
//! or by `namespace:key`. One home for turning that into the job's id, so
//! every route that takes a job takes all three.

use uuid::Uuid;

use crate::AppState;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};

/// The job `raw` names, among the caller's namespaces. An id is returned as
/// it is (the route checks it is the caller's); a key is looked up: its
/// live job, or when none is live, the job that last had it (a deleted
/// job's history and executions stay reachable by its key).
pub async fn resolve(state: &AppState, caller: &Caller, raw: &str) -> ApiResult<Uuid> {
    if let Ok(id) = raw.parse::<Uuid>() {
        return Ok(id);
    }
    let (namespace, key) = match raw.split_once(':') {
        Some((namespace, key)) => (Some(namespace), key),
        None => (None, raw),
    };
    let unknown = || ApiError::NotFound(format!("no job with id or key {raw:?}"));
    if domain::labels::check_job_key(key).is_err()
        || namespace.is_some_and(|n| crate::params::namespace_name(n).is_err())
    {
        return Err(unknown());
    }
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let found = store::jobs::by_key(&client, key, namespace, scope.as_deref()).await?;
    match found.as_slice() {
        [] => Err(unknown()),
        [one] => Ok(one.id),
        several => {
            let namespaces: Vec<&str> = several.iter().map(|m| m.namespace.as_str()).collect();
            Err(ApiError::BadRequest(format!(
                "key {key:?} names jobs in the namespaces {}; name one as namespace:key, e.g. {}:{key}",
                namespaces.join(", "),
                namespaces[0]
            )))
        }
    }
}
