//! Many schedules at once: `POST /v1/tenants/{tenant}/schedules:batch`.

use super::shared::{AuditTarget, Audited};
use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::Value;
use toki_core::registrar::{check_batch_len, Registered, RegistrarError};
use toki_model::input::ScheduleInput;
use toki_model::{ScheduleId, ValidationError};
use utoipa::ToSchema;

use super::shared::{
    bad_body, bad_input, from_json, schedule_response, serde_field, ApiError, ApiState,
    AuthedTenant, BatchItemDoc, ErrorBody, ErrorDetail, IdempotencyKeyHeader, IdempotentBodyErrors,
    JsonBody, ScheduleResponse, TenantErrors, TenantPath, MAX_BATCH_BODY_BYTES,
};

/// `POST .../schedules:batch`: `{"schedules": [{"id": ..., <schedule>}, ...]}`.
/// Items stay JSON values here: each is parsed on its own, so one bad item
/// does not fail the others.
#[derive(serde::Deserialize, ToSchema)]
#[schema(as = BatchInput)]
#[serde(deny_unknown_fields)]
struct BatchInput {
    /// At most 1,000.
    #[schema(value_type = Vec<BatchItemDoc>, max_items = 1000)]
    schedules: Vec<Value>,
}

/// The answer to a batch: a result per item, in order.
#[derive(Serialize, ToSchema)]
#[schema(as = BatchResult)]
pub(crate) struct BatchResponse {
    /// Items written (200 or 202).
    written: usize,
    failed: usize,
    results: Vec<BatchItemResult>,
}

/// One item's answer: `index`, `status` (what the item's own `PUT` would
/// have answered) and that answer's body.
#[derive(Serialize, ToSchema)]
struct BatchItemResult {
    index: usize,
    status: u16,
    #[serde(flatten)]
    outcome: BatchOutcome,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum BatchOutcome {
    /// Written: the schedule (its `id` among its fields).
    Written(Box<ScheduleResponse>),
    /// Not written: why, with the item's `id` when it had a valid one.
    Failed {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        error: ErrorDetail,
    },
}

/// An item of a batch as a schedule input, or the error naming its field
/// (`schedules[i].<field>`).
fn batch_item(i: usize, item: Value) -> Result<(ScheduleId, ScheduleInput), ValidationError> {
    let field = |f: &str| format!("schedules[{i}].{f}");
    let Value::Object(mut item) = item else {
        return Err(ValidationError::new(
            format!("schedules[{i}]"),
            "must be an object",
        ));
    };
    let id = match item.remove("id") {
        Some(Value::String(id)) => id
            .parse::<ScheduleId>()
            .map_err(|e| ValidationError::new(field("id"), e.problem))?,
        Some(_) => return Err(ValidationError::new(field("id"), "must be a string")),
        None => return Err(ValidationError::new(field("id"), "is required")),
    };
    let input = from_json::<ScheduleInput>(Value::Object(item)).map_err(|e| {
        let text = e.to_string();
        let name = field(serde_field(&text).unwrap_or(""));
        ValidationError::new(name.trim_end_matches('.'), text)
    })?;
    Ok((id, input))
}

/// Registers up to [`toki_core::registrar::MAX_BATCH`] schedules in one call: 200 with a result
/// per item (its own status, its schedule or its error), in order; items
/// that are invalid do not stop the others.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/schedules:batch",
    tag = "schedules",
    params(TenantPath, IdempotencyKeyHeader),
    request_body = BatchInput,
    responses(
        (status = 200, description = "Each item as its own `PUT` would have answered (`status`, the schedule or `error`, with `field` as `schedules[i].<field>`); the valid items are written, in one transaction, even when others are not. With an `Idempotency-Key` seen before for this request: the first answer again, nothing written", body = BatchResponse,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the first answer to an earlier request with the same `Idempotency-Key`, replayed; absent otherwise"))),
        (status = 422, description = "More than 1,000 items, or items that would put more reminders in the index than a batch may (`invalid`, `field`: `schedules`, naming the limit), or an `Idempotency-Key` used within 24 h for another request (`idempotency_key_reused`, `field`: `Idempotency-Key`); nothing written", body = ErrorBody),
        IdempotentBodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_schedules(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<(Extension<Audited>, Json<BatchResponse>), ApiError> {
    let Json(batch) = body.map_err(|r| bad_body(r, MAX_BATCH_BODY_BYTES))?;
    let batch: BatchInput = from_json(batch).map_err(bad_input)?;
    // The whole batch, before its items: the registrar sees only the valid ones.
    check_batch_len(batch.schedules.len())?;
    // Up to 1,000 items read into inputs: CPU work, off the runtime's workers
    // (the registrar validates and expands them on one too).
    let parsed = tokio::task::spawn_blocking(move || parse_items(batch.schedules))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let mut registered = state
        .registrar
        .put_schedules(&tenant, &parsed.valid)
        .await?
        .into_iter();
    let (results, targets): (Vec<BatchItemResult>, Vec<Option<AuditTarget>>) = parsed
        .ids
        .into_iter()
        .enumerate()
        .map(|(index, p)| item_result(index, p, &mut registered))
        .unzip();
    let audited = Audited(targets.into_iter().flatten().collect());
    let written = results
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .count();
    Ok((
        Extension(audited),
        Json(BatchResponse {
            written,
            failed: results.len() - written,
            results,
        }),
    ))
}

/// A batch's items parsed: each item's id or error, in order, and the
/// items that parsed (what goes to the registrar).
struct ParsedItems {
    ids: Vec<Result<ScheduleId, ValidationError>>,
    valid: Vec<(ScheduleId, ScheduleInput)>,
}

fn parse_items(schedules: Vec<Value>) -> ParsedItems {
    let mut valid: Vec<(ScheduleId, ScheduleInput)> = Vec::with_capacity(schedules.len());
    let ids = schedules
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            batch_item(i, item).map(|(id, input)| {
                valid.push((id.clone(), input));
                id
            })
        })
        .collect();
    ParsedItems { ids, valid }
}

/// An item's answer: its parse error, or what the registrar made of it
/// (the next of `registered`, a result per parsed item in order); and,
/// if it was written, its audit target.
fn item_result(
    index: usize,
    parsed: Result<ScheduleId, ValidationError>,
    registered: &mut impl Iterator<Item = Result<Registered, RegistrarError>>,
) -> (BatchItemResult, Option<AuditTarget>) {
    let (id, outcome) = match parsed {
        Err(e) => (None, Err(ApiError::from(e))),
        Ok(id) => (
            Some(id.to_string()),
            registered
                .next()
                .expect("a result per parsed item")
                .map_err(|e| ApiError::from(in_item(index, e))),
        ),
    };
    let (status, outcome, target) = match outcome {
        Ok(r) => {
            let (status, Extension(Audited(target)), Json(body)) = schedule_response(r);
            let target = target.into_iter().next();
            (status, BatchOutcome::Written(Box::new(body)), target)
        }
        Err(e) => (
            e.status(),
            BatchOutcome::Failed {
                id,
                error: e.body(),
            },
            None,
        ),
    };
    let result = BatchItemResult {
        index,
        status: status.as_u16(),
        outcome,
    };
    (result, target)
}

/// An item's validation error names its place in the batch.
fn in_item(index: usize, e: RegistrarError) -> RegistrarError {
    match e {
        RegistrarError::Invalid(v) => RegistrarError::Invalid(ValidationError::new(
            format!("schedules[{index}].{}", v.field),
            v.problem,
        )),
        other => other,
    }
}
