//! A tenant's reminder templates: `GET /v1/tenants/{tenant}/templates`,
//! `PUT/GET/DELETE /v1/tenants/{tenant}/templates/{channel}/{locale}`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use toki_core::registrar::Registrar;
use toki_model::template::{ReminderTemplate, TemplateInput, Texts};
use toki_model::{Channel, ValidationError};
use utoipa::ToSchema;

use super::shared::{
    parse_body, ApiError, ApiState, AuthedTenant, BodyErrors, ErrorBody, JsonBody,
    TemplateInputDoc, TemplateKeyPath, TemplateParams, TenantErrors, TenantPath,
};

/// Whose a template is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The tenant's own.
    Tenant,
    /// Built in.
    Default,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Tenant => "tenant",
            Source::Default => "default",
        }
    }
}

/// A reminder template: whose it is, and its parts.
#[derive(Serialize, ToSchema)]
#[schema(as = Template)]
pub(crate) struct TemplateView {
    channel: String,
    /// Lowercase (`ja`, `en-gb`).
    locale: String,
    /// `tenant`: the tenant's own; `default`: built in.
    #[schema(pattern = "^(tenant|default)$")]
    source: String,
    /// Mail only.
    #[schema(required = true)]
    subject: Option<String>,
    text: String,
    /// Mail only: the HTML part (absent: the text, escaped).
    #[schema(required = true)]
    html: Option<String>,
}

impl TemplateView {
    fn new(t: ReminderTemplate, source: Source) -> Self {
        Self {
            channel: t.channel.to_string(),
            locale: t.locale,
            source: source.as_str().into(),
            subject: t.subject,
            text: t.text,
            html: t.html,
        }
    }
}

/// A reminder as a template renders it.
#[derive(Serialize, ToSchema)]
#[schema(as = RenderedReminder)]
pub(crate) struct TextsView {
    subject: String,
    text: String,
    /// Mail only.
    #[schema(required = true)]
    html: Option<String>,
}

impl From<Texts> for TextsView {
    fn from(t: Texts) -> Self {
        Self {
            subject: t.subject,
            text: t.text,
            html: t.html,
        }
    }
}

/// A template as written, and what it makes of a sample reminder.
#[derive(Serialize, ToSchema)]
#[schema(as = WrittenTemplate)]
pub(crate) struct WrittenTemplate {
    #[serde(flatten)]
    template: TemplateView,
    /// A sample reminder (Ana, in Berlin, 10 minutes before "Weekly review") rendered with it.
    example: TextsView,
}

/// The tenant's templates.
#[derive(Serialize, ToSchema)]
#[schema(as = Templates)]
pub(crate) struct TemplatesView {
    /// The tenant's own, by channel then locale; where it has none the
    /// defaults (`en`, `ja`; English for any other language) apply.
    templates: Vec<TemplateView>,
}

fn path_channel(channel: &str) -> Result<Channel, ApiError> {
    channel.parse::<Channel>().map_err(|_| {
        ValidationError::new(
            "channel",
            format!("{channel:?} is not a channel (mail, chat or slack)"),
        )
        .into()
    })
}

/// Creates or replaces the tenant's template of a channel in a locale.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/templates/{channel}/{locale}",
    tag = "templates",
    params(TenantPath, TemplateKeyPath),
    request_body = TemplateInputDoc,
    responses(
        (status = 200, description = "Written: the channel's reminders to recipients of this locale use it from the next batch", body = WrittenTemplate),
        (status = 422, description = "Not valid (`field` names it): `channel`, `locale`, or a part (`subject`, `text`, `html`) that does not compile, uses an unknown variable, renders empty, is too long, or crosses a render limit (fuel, nesting, output size) with the largest inputs; `subject` and `html` are for mail only. Nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_template(
    State(state): State<ApiState>,
    Path(TemplateParams { channel, locale }): Path<TemplateParams>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<Json<WrittenTemplate>, ApiError> {
    let channel = path_channel(&channel)?;
    let input: TemplateInput = parse_body(body)?;
    let t = state
        .registrar
        .put_template(&tenant, channel, &locale, &input)
        .await?;
    // Checked when validated: renders.
    let example = t.example()?.into();
    Ok(Json(WrittenTemplate {
        template: TemplateView::new(t, Source::Tenant),
        example,
    }))
}

/// The tenant's template of a channel in a locale.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/templates/{channel}/{locale}",
    tag = "templates",
    params(TenantPath, TemplateKeyPath),
    responses(
        (status = 200, description = "The tenant's template", body = TemplateView),
        (status = 404, description = "The tenant has none: its reminders in the locale use the default (`GET /v1/templates/{channel}/{locale}`)", body = ErrorBody),
        (status = 422, description = "`channel` or `locale` is not valid (`field` names it)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn get_template(
    State(state): State<ApiState>,
    Path(TemplateParams { channel, locale }): Path<TemplateParams>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<TemplateView>, ApiError> {
    let channel = path_channel(&channel)?;
    let t = state.registrar.template(&tenant, channel, &locale).await?;
    Ok(Json(TemplateView::new(t, Source::Tenant)))
}

/// A built-in template: what a channel's reminders in a locale get where the
/// tenant has none of its own. A language without one (404) reads `en`.
#[utoipa::path(
    get,
    path = "/v1/templates/{channel}/{locale}",
    tag = "templates",
    params(TemplateKeyPath),
    responses(
        (status = 200, description = "The default (`source`: `default`)", body = TemplateView),
        (status = 404, description = "No default for the locale (defaults: `en`, `ja`)", body = ErrorBody),
        (status = 422, description = "`channel` or `locale` is not valid (`field` names it)", body = ErrorBody),
    )
)]
pub(crate) async fn get_default_template(
    Path((channel, locale)): Path<(String, String)>,
) -> Result<Json<TemplateView>, ApiError> {
    let channel = path_channel(&channel)?;
    let t = Registrar::default_template(channel, &locale)?;
    Ok(Json(TemplateView::new(t, Source::Default)))
}

/// Deletes the tenant's template of a channel in a locale: the default applies again.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/templates/{channel}/{locale}",
    tag = "templates",
    params(TenantPath, TemplateKeyPath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "The tenant has no such template", body = ErrorBody),
        (status = 422, description = "`channel` or `locale` is not valid (`field` names it)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn delete_template(
    State(state): State<ApiState>,
    Path(TemplateParams { channel, locale }): Path<TemplateParams>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<StatusCode, ApiError> {
    let channel = path_channel(&channel)?;
    state
        .registrar
        .delete_template(&tenant, channel, &locale)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant's own templates.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/templates",
    tag = "templates",
    params(TenantPath),
    responses(
        (status = 200, description = "The tenant's own templates (the defaults apply where it has none)", body = TemplatesView),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn list_templates(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<TemplatesView>, ApiError> {
    let templates = state.registrar.templates(&tenant).await?;
    Ok(Json(TemplatesView {
        templates: templates
            .into_iter()
            .map(|t| TemplateView::new(t, Source::Tenant))
            .collect(),
    }))
}
