//! Users: `PUT/GET /v1/tenants/{tenant}/users/{id}`.

use axum::extract::{Path, State};
use axum::Json;
use toki_model::input::{UserInput, UserView};
use toki_model::UserId;

use super::shared::{
    parse_body, path_id, ApiError, ApiState, AuthedTenant, BodyErrors, ErrorBody, IdParam,
    JsonBody, TenantErrors, UserInputDoc, UserPath, UserViewDoc,
};

/// Creates or replaces a user.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/users/{id}",
    tag = "users",
    params(UserPath),
    request_body = UserInputDoc,
    responses(
        (status = 200, description = "Written", body = UserViewDoc),
        (status = 422, description = "A value is not valid (`field` names it: `id`, `name`, `email`, `slack_user_id`, `webhook_url`, `time_zone`, `locale`); nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_user(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<Json<UserView>, ApiError> {
    let id: UserId = path_id(&id)?;
    let input: UserInput = parse_body(body)?;
    let u = state.registrar.put_user(&tenant, &id, &input).await?;
    Ok(Json(UserView::from(&u)))
}

/// A user.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/users/{id}",
    tag = "users",
    params(UserPath),
    responses(
        (status = 200, description = "The user", body = UserViewDoc),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "The id is not a user id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn get_user(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<UserView>, ApiError> {
    let u = state.registrar.get_user(&tenant, &path_id(&id)?).await?;
    Ok(Json(UserView::from(&u)))
}
