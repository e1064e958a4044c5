//! `GET /healthz`.

/// The process is up (it checks nothing else).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Up", body = String, content_type = "text/plain", example = "ok")),
)]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}
