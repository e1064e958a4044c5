//! The OpenAPI document served at `/openapi.json`, in-process
//! (`tower::ServiceExt::oneshot`): it is OpenAPI 3 with every route of the
//! router and its methods; its id patterns are the id parsers'; its schemas
//! have exactly the fields of the real input and view types (serialised
//! fully populated, and the inputs' `deny_unknown_fields` and defaults held
//! to the schemas' `properties` and `required`); and every answer the
//! router gives here, errors included, matches the document.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use toki_model::input::{
    DstInput, OccurrenceInput, RecurrenceInput, RuleInput, ScheduleInput, UserInput,
};
use toki_model::template::TemplateInput;
use toki_model::{Channel, ScheduleId, TenantId, UserId};
use tower::ServiceExt;

use crate::common::{kit_with_tenant, KEY};

/// Every route of `api::router` and its methods.
const ROUTES: &[(&str, &[&str])] = &[
    (
        "/v1/tenants/{tenant}/schedules/{id}",
        &["delete", "get", "put"],
    ),
    ("/v1/tenants/{tenant}/schedules:batch", &["post"]),
    ("/v1/tenants/{tenant}/schedules/{id}/occurrences", &["get"]),
    (
        "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}",
        &["delete", "put"],
    ),
    (
        "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}/following",
        &["put"],
    ),
    ("/v1/tenants/{tenant}/users/{id}", &["delete", "get", "put"]),
    ("/v1/tenants/{tenant}/webhook", &["get", "put"]),
    ("/v1/tenants/{tenant}/webhook/secret:rotate", &["post"]),
    ("/v1/tenants/{tenant}/suppressions", &["get"]),
    (
        "/v1/tenants/{tenant}/suppressions/{address}",
        &["delete", "put"],
    ),
    ("/v1/tenants/{tenant}/mail", &["get", "put"]),
    ("/v1/tenants/{tenant}/templates", &["get"]),
    (
        "/v1/tenants/{tenant}/templates/{channel}/{locale}",
        &["delete", "get", "put"],
    ),
    ("/v1/templates/{channel}/{locale}", &["get"]),
    ("/v1/tenants/{tenant}/event-endpoints", &["get"]),
    (
        "/v1/tenants/{tenant}/event-endpoints/{id}",
        &["delete", "get", "put"],
    ),
    (
        "/v1/tenants/{tenant}/event-endpoints/{id}/secret:rotate",
        &["post"],
    ),
    (
        "/v1/tenants/{tenant}/event-endpoints/{id}/enable",
        &["post"],
    ),
    (
        "/v1/tenants/{tenant}/event-endpoints/{id}/replay",
        &["post"],
    ),
    ("/v1/tenants/{tenant}/events", &["get"]),
    ("/v1/tenants/{tenant}/audit", &["get"]),
    ("/healthz", &["get"]),
    ("/openapi.json", &["get"]),
];

/// An answer: status, content type and body (JSON, or the text).
struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    body: Value,
}

async fn send(kit: &TestKit, req: Request<Body>) -> Answer {
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Answer {
        status,
        content_type,
        body,
    }
}

async fn document(kit: &TestKit) -> Doc {
    let a = send(
        kit,
        Request::get("/openapi.json").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.content_type.as_deref(), Some("application/json"));
    Doc(a.body)
}

/// The document, and what the test asks of it.
struct Doc(Value);

impl Doc {
    fn schema(&self, name: &str) -> &Value {
        let s = &self.0["components"]["schemas"][name];
        assert!(s.is_object(), "no schema {name}");
        s
    }

    /// `$ref`s followed.
    fn resolve<'a>(&'a self, mut schema: &'a Value) -> &'a Value {
        while let Some(r) = schema["$ref"].as_str() {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("a ref outside the schemas: {r}"));
            schema = self.schema(name);
        }
        schema
    }

    /// The documented answer of `method` on the concrete `path` with `status`.
    fn response(&self, method: &str, path: &str, status: StatusCode) -> &Value {
        let path = path.split('?').next().unwrap();
        let (template, item) = self.0["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(template, _)| matches_template(template, path))
            .unwrap_or_else(|| panic!("{path} is not in the document"));
        let op = &item[method.to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in the document");
        let r = &op["responses"][status.as_str()];
        assert!(
            r.is_object(),
            "{method} {template} answered {status}, which the document does not list"
        );
        r
    }

    /// Whether `value` is valid by `schema`: the JSON Schema keywords the
    /// document uses.
    fn validate(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        let schema = self.resolve(schema);
        if let Some(all) = schema["allOf"].as_array() {
            for s in all {
                self.validate(s, value, at)?;
            }
        }
        if let Some(one) = schema["oneOf"].as_array() {
            let ok = one
                .iter()
                .filter(|s| self.validate(s, value, at).is_ok())
                .count();
            if ok != 1 {
                return Err(format!("{at}: {ok} of oneOf match {value}"));
            }
        }
        if let Some(t) = schema.get("type") {
            let types: Vec<&str> = match t {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
                _ => panic!("type {t}"),
            };
            let kind = match value {
                Value::Null => "null",
                Value::Bool(_) => "boolean",
                Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            let ok = types.contains(&kind) || (kind == "integer" && types.contains(&"number"));
            if !ok {
                return Err(format!("{at}: {value} is not {t}"));
            }
        }
        if let Some(e) = schema["enum"].as_array() {
            if !e.contains(value) {
                return Err(format!("{at}: {value} is not one of {e:?}"));
            }
        }
        match value {
            Value::Object(fields) => {
                let props = &schema["properties"];
                for r in schema["required"].as_array().into_iter().flatten() {
                    if !fields.contains_key(r.as_str().unwrap()) {
                        return Err(format!("{at}: missing required {r}"));
                    }
                }
                for (k, v) in fields {
                    match props.get(k) {
                        Some(s) => self.validate(s, v, &format!("{at}.{k}"))?,
                        None if schema["additionalProperties"] == json!(false) => {
                            return Err(format!("{at}: {k} is not allowed"))
                        }
                        None => {}
                    }
                }
            }
            Value::Array(items) => {
                if let Some(max) = schema["maxItems"].as_u64() {
                    if items.len() as u64 > max {
                        return Err(format!("{at}: more than {max} items"));
                    }
                }
                if let Some(min) = schema["minItems"].as_u64() {
                    if (items.len() as u64) < min {
                        return Err(format!("{at}: fewer than {min} items"));
                    }
                }
                if let Some(s) = schema.get("items") {
                    for (i, v) in items.iter().enumerate() {
                        self.validate(s, v, &format!("{at}[{i}]"))?;
                    }
                }
            }
            Value::String(text) => {
                if let Some(p) = schema["pattern"].as_str() {
                    if !regex::Regex::new(p).unwrap().is_match(text) {
                        return Err(format!("{at}: {text:?} does not match {p}"));
                    }
                }
                if let Some(max) = schema["maxLength"].as_u64() {
                    if text.chars().count() as u64 > max {
                        return Err(format!("{at}: longer than {max}"));
                    }
                }
                if schema["format"] == "date-time"
                    && chrono::DateTime::parse_from_rfc3339(text).is_err()
                {
                    return Err(format!("{at}: {text:?} is not an RFC 3339 date-time"));
                }
            }
            Value::Number(n) => {
                let n = n.as_f64().unwrap();
                if schema["minimum"].as_f64().is_some_and(|min| n < min)
                    || schema["maximum"].as_f64().is_some_and(|max| n > max)
                {
                    return Err(format!("{at}: {n} is out of range"));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The object parts of `schema` for `value`: through `$ref` and `allOf`,
    /// and the `oneOf` branch `value` matches; each with where it is defined.
    fn parts<'a>(
        &'a self,
        schema: &'a Value,
        value: &Value,
        at: String,
        out: &mut Vec<(String, &'a Value)>,
    ) {
        let (schema, at) = match schema["$ref"].as_str() {
            Some(r) => (
                self.resolve(schema),
                r.rsplit('/').next().unwrap().to_owned(),
            ),
            None => (schema, at),
        };
        for (i, s) in schema["allOf"].as_array().into_iter().flatten().enumerate() {
            self.parts(s, value, format!("{at}/allOf/{i}"), out);
        }
        if let Some(one) = schema["oneOf"].as_array() {
            let (i, s) = one
                .iter()
                .enumerate()
                .find(|(_, s)| self.validate(s, value, &at).is_ok())
                .unwrap_or_else(|| panic!("{at}: no oneOf branch takes {value}"));
            self.parts(s, value, format!("{at}/oneOf/{i}"), out);
        }
        if schema["properties"].is_object() {
            out.push((at, schema));
        }
    }

    /// Records, for every object schema `value` reaches, the properties it
    /// documents and those `value` has; fails on a key the schema lacks.
    fn fields(&self, schema: &Value, value: &Value, at: String, seen: &mut Seen) {
        match value {
            Value::Object(fields) => {
                let mut parts = Vec::new();
                self.parts(schema, value, at.clone(), &mut parts);
                assert!(
                    !parts.is_empty(),
                    "{at}: {value} where no object is documented"
                );
                for (k, v) in fields {
                    let (part, s) = parts
                        .iter()
                        .find(|(_, s)| s["properties"].get(k).is_some())
                        .unwrap_or_else(|| {
                            panic!("{at}: the real type has `{k}`, which the document lacks")
                        });
                    seen.entry(part.clone()).or_default().1.insert(k.clone());
                    self.fields(&s["properties"][k], v, format!("{part}.{k}"), seen);
                }
                for (part, s) in parts {
                    let documented = s["properties"].as_object().unwrap().keys().cloned();
                    seen.entry(part).or_default().0.extend(documented);
                }
            }
            Value::Array(items) => {
                let schema = self.resolve(schema);
                let items_schema = match schema["oneOf"].as_array() {
                    // An optional array: the branch that is one.
                    Some(one) => one
                        .iter()
                        .map(|s| self.resolve(s))
                        .find(|s| s["items"].is_object())
                        .unwrap(),
                    None => schema,
                };
                for (i, v) in items.iter().enumerate() {
                    self.fields(&items_schema["items"], v, format!("{at}[{i}]"), seen);
                }
            }
            _ => {}
        }
    }
}

/// Per object schema: the properties documented, and those seen in real values.
type Seen = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

/// Every documented property was in some fully populated real value.
fn assert_all_seen(seen: &Seen) {
    for (part, (documented, present)) in seen {
        let missing: Vec<_> = documented.difference(present).collect();
        assert!(
            missing.is_empty(),
            "{part} documents {missing:?}, which no fully populated real value has (removed from the type?)"
        );
    }
}

fn matches_template(template: &str, path: &str) -> bool {
    let (t, p): (Vec<_>, Vec<_>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}

/// Calls the router and holds the answer to the document: its status is
/// listed for the route, and its content type and body are the listed ones.
async fn call(kit: &TestKit, doc: &Doc, method: &str, path: &str, body: Option<Value>) -> Answer {
    let req = crate::common::request(method, path, Some(KEY), body);
    conforms(doc, method, path, send(kit, req).await)
}

fn conforms(doc: &Doc, method: &str, path: &str, a: Answer) -> Answer {
    let documented = doc.response(method, path, a.status);
    match documented["content"].as_object() {
        None => assert_eq!(
            a.body,
            Value::Null,
            "{method} {path}: {} has no body",
            a.status
        ),
        Some(content) => {
            let ct = a.content_type.as_deref().unwrap_or("");
            let (media, c) = content
                .iter()
                .find(|(m, _)| ct.starts_with(m.as_str()))
                .unwrap_or_else(|| {
                    panic!("{method} {path}: content type {ct:?} is not documented")
                });
            if media == "application/json" {
                doc.validate(&c["schema"], &a.body, "body")
                    .unwrap_or_else(|e| panic!("{method} {path} {}: {e}\n{}", a.status, a.body));
            }
        }
    }
    a
}

fn fully_populated_template() -> TemplateInput {
    TemplateInput {
        subject: Some("[{{ minutes }} min] {{ title }}".into()),
        text: "{{ name }}: {{ title }} at {{ time }}".into(),
        html: Some("<p>{{ name }}: <b>{{ title }}</b></p>".into()),
    }
}

fn fully_populated_inputs() -> (ScheduleInput, UserInput, OccurrenceInput) {
    let schedule = ScheduleInput {
        title: "Stand-up".into(),
        body: "Room 3".into(),
        starts_at: "2030-01-07T09:00:00".into(),
        time_zone: "Asia/Tokyo".into(),
        participants: vec!["ana".into(), "bob".into()],
        reminders: vec![RuleInput {
            minutes_before: 10,
            channels: vec!["mail".into(), "chat".into()],
        }],
        recurrence: Some(RecurrenceInput {
            rrule: "FREQ=WEEKLY;BYDAY=MO;COUNT=10".into(),
            exdates: vec!["2030-01-14T09:00:00".into()],
        }),
        dst: Some(DstInput {
            nonexistent: Some("skip".into()),
            ambiguous: Some("last".into()),
        }),
    };
    let user = UserInput {
        name: "Ana".into(),
        email: Some("ana@example.com".into()),
        slack_user_id: Some("U024BE7LH".into()),
        webhook_url: Some("https://hooks.example.com/toki".into()),
        time_zone: "Europe/Paris".into(),
        locale: "fr".into(),
        channels: [
            ("mail".into(), true),
            ("chat".into(), true),
            ("slack".into(), false),
            ("webhook".into(), true),
        ]
        .into(),
    };
    let occurrence = OccurrenceInput {
        starts_at: Some("2030-01-21T10:00:00".into()),
        title: Some("Stand-up (late)".into()),
        body: Some("Room 4".into()),
    };
    (schedule, user, occurrence)
}

#[tokio::test(start_paused = true)]
async fn the_document_is_openapi_3_with_every_route_and_method() {
    let kit = kit_with_tenant().await;
    let doc = document(&kit).await;
    assert!(
        doc.0["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc.0["openapi"]
    );
    assert!(doc.0["info"]["title"].is_string() && doc.0["info"]["version"].is_string());
    let documented: BTreeMap<String, BTreeSet<String>> = doc.0["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, item)| {
            (
                p.clone(),
                item.as_object().unwrap().keys().cloned().collect(),
            )
        })
        .collect();
    let routes: BTreeMap<String, BTreeSet<String>> = ROUTES
        .iter()
        .map(|(p, ms)| (p.to_string(), ms.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(documented, routes);
    let schemes = &doc.0["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["api_key"]["in"], "header");
    assert_eq!(schemes["api_key"]["name"], api::API_KEY_HEADER);
    for (path, methods) in ROUTES {
        // The router has each documented method, and only those.
        let concrete = path
            .replace("{tenant}", "acme")
            .replace("{id}", "x")
            .replace("{address}", "ana@example.com")
            .replace("{original}", "2030-01-07T09:00:00");
        for method in ["GET", "PUT", "POST", "DELETE", "PATCH"] {
            let a = send(
                &kit,
                Request::builder()
                    .method(method)
                    .uri(&concrete)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
            let listed = methods.contains(&method.to_lowercase().as_str());
            assert_eq!(
                a.status != StatusCode::METHOD_NOT_ALLOWED,
                listed,
                "{method} {concrete}: {}",
                a.status
            );
            if listed {
                // No key: the tenant routes say 401, as documented.
                conforms(&doc, method, &concrete, a);
            }
        }
        for method in methods.iter() {
            let op = &doc.0["paths"][path][method];
            // A tenant's routes need its key; the built-in templates do not.
            if path.starts_with("/v1/tenants/") {
                assert_eq!(
                    op["security"],
                    json!([{"bearer": []}, {"api_key": []}]),
                    "{method} {path}"
                );
                for status in ["401", "503"] {
                    assert!(
                        op["responses"][status].is_object(),
                        "{method} {path} {status}"
                    );
                }
            }
            // Every parameter in the path template is described.
            let names: BTreeSet<&str> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            let in_template: BTreeSet<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            assert_eq!(names, in_template, "{method} {path}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn path_patterns_are_the_id_parsers() {
    let kit = kit_with_tenant().await;
    let doc = document(&kit).await;
    let pattern = |path: &str, method: &str, name: &str| -> regex::Regex {
        let p = doc.0["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{method} {path}: no parameter {name}"));
        regex::Regex::new(p["schema"]["pattern"].as_str().unwrap()).unwrap()
    };
    let long = |n: usize| "a".repeat(n);
    let samples: Vec<String> = [
        "",
        "a",
        "acme",
        "a-b_c9",
        "Acme",
        "1acme",
        "_a",
        "a b",
        "a.b",
        "a:b@c",
        "a/b",
        "a,b",
        "a#b",
        "é",
        "ü1",
        ".",
        "..",
        "-",
        "A_Z-0.9:@",
        "x\n",
    ]
    .into_iter()
    .map(String::from)
    .chain([long(40), long(41), long(128), long(129)])
    .collect();
    let schedules = "/v1/tenants/{tenant}/schedules/{id}";
    let users = "/v1/tenants/{tenant}/users/{id}";
    let mut tenant_patterns = Vec::new();
    for (path, methods) in ROUTES.iter().filter(|(p, _)| p.starts_with("/v1/tenants/")) {
        for m in methods.iter() {
            tenant_patterns.push(pattern(path, m, "tenant"));
        }
    }
    for s in &samples {
        for p in &tenant_patterns {
            assert_eq!(p.is_match(s), s.parse::<TenantId>().is_ok(), "tenant {s:?}");
        }
        for (path, m) in [
            (schedules, "put"),
            (schedules, "get"),
            (schedules, "delete"),
        ] {
            let p = pattern(path, m, "id");
            assert_eq!(
                p.is_match(s),
                s.parse::<ScheduleId>().is_ok(),
                "schedule {s:?}"
            );
        }
        for m in ["put", "get", "delete"] {
            let p = pattern(users, m, "id");
            assert_eq!(p.is_match(s), s.parse::<UserId>().is_ok(), "user {s:?}");
        }
        for m in ["put", "get", "delete"] {
            let p = pattern("/v1/tenants/{tenant}/event-endpoints/{id}", m, "id");
            let parsed = s.parse::<toki_model::EndpointId>().is_ok();
            assert_eq!(p.is_match(s), parsed, "endpoint {s:?}");
        }
        // The ids inside bodies: participants, a batch item's and a split's new one.
        for (schema, at) in [
            (doc.schema("UserId"), "UserId"),
            (doc.schema("ScheduleId"), "ScheduleId"),
            (&doc.schema("SplitInput")["properties"]["new_id"], "new_id"),
        ] {
            let p = regex::Regex::new(schema["pattern"].as_str().unwrap()).unwrap();
            assert_eq!(p.is_match(s), s.parse::<UserId>().is_ok(), "{at} {s:?}");
        }
    }
}

/// A real input type against its schema: its fully populated value is valid
/// and has the schema's properties exactly; a key outside them is refused
/// (`deny_unknown_fields`); leaving out a property is accepted exactly when
/// the schema does not require it.
fn input_matches<T: Serialize + DeserializeOwned>(doc: &Doc, name: &str, real: &T) {
    let schema = doc.schema(name);
    let value = serde_json::to_value(real).unwrap();
    doc.validate(schema, &value, name)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut seen = Seen::new();
    doc.fields(schema, &value, name.into(), &mut seen);
    assert_all_seen(&seen);
    assert_eq!(
        schema["additionalProperties"],
        json!(false),
        "{name}: unknown fields are refused, so the schema says so"
    );
    let mut extra = value.clone();
    extra["not_in_the_schema"] = json!(1);
    assert!(
        serde_json::from_value::<T>(extra).is_err(),
        "{name} takes a field its schema does not have"
    );
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r.as_str().unwrap())
        .collect();
    for key in schema["properties"].as_object().unwrap().keys() {
        let mut without = value.clone();
        without.as_object_mut().unwrap().remove(key);
        assert_eq!(
            serde_json::from_value::<T>(without).is_ok(),
            !required.contains(key.as_str()),
            "{name}.{key}: required by the type iff by the schema"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn input_schemas_have_exactly_the_fields_of_the_input_types() {
    let kit = kit_with_tenant().await;
    let doc = document(&kit).await;
    let (schedule, user, occurrence) = fully_populated_inputs();
    input_matches(&doc, "ScheduleInput", &schedule);
    input_matches(&doc, "ReminderRule", &schedule.reminders[0]);
    input_matches(&doc, "Recurrence", schedule.recurrence.as_ref().unwrap());
    input_matches(&doc, "DstPolicy", schedule.dst.as_ref().unwrap());
    input_matches(&doc, "UserInput", &user);
    input_matches(&doc, "OccurrenceInput", &occurrence);
    input_matches(&doc, "TemplateInput", &fully_populated_template());
    // The enumerations are the parsers'.
    let names = |schema: &str| -> Vec<String> {
        doc.schema(schema)["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names("Channel"),
        Channel::ALL
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
    );
    for n in names("NonexistentTime") {
        let dst = DstInput {
            nonexistent: Some(n.clone()),
            ambiguous: None,
        };
        assert_eq!(dst.validate().unwrap().nonexistent.to_string(), n);
    }
    for a in names("AmbiguousTime") {
        let dst = DstInput {
            nonexistent: None,
            ambiguous: Some(a.clone()),
        };
        assert_eq!(dst.validate().unwrap().ambiguous.to_string(), a);
    }
    // A value beside the enumerations is refused, so they are complete.
    assert!(DstInput {
        nonexistent: Some("later".into()),
        ambiguous: None
    }
    .validate()
    .is_err());
    // The example bodies are valid inputs.
    for (name, example) in [
        ("ScheduleInput", &doc.schema("ScheduleInput")["example"]),
        ("UserInput", &doc.schema("UserInput")["example"]),
        ("OccurrenceInput", &doc.schema("OccurrenceInput")["example"]),
        ("TemplateInput", &doc.schema("TemplateInput")["example"]),
    ] {
        doc.validate(doc.schema(name), example, name).unwrap();
    }
    let example: ScheduleInput =
        serde_json::from_value(doc.schema("ScheduleInput")["example"].clone()).unwrap();
    example
        .validate(&"standup-1".parse().unwrap(), kit.now())
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_answer_matches_the_document_and_views_have_exactly_the_documented_fields() {
    let kit = kit_with_tenant().await;
    let doc = document(&kit).await;
    let (series, user, occurrence) = fully_populated_inputs();
    let base = "/v1/tenants/acme";
    let mut seen = Seen::new();
    let mut view = |name: &str, body: &Value| {
        doc.fields(doc.schema(name), body, name.into(), &mut seen);
    };
    for id in ["ana", "bob"] {
        let a = call(
            &kit,
            &doc,
            "PUT",
            &format!("{base}/users/{id}"),
            Some(json!(user)),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        view("User", &a.body);
    }
    let a = call(&kit, &doc, "GET", &format!("{base}/users/ana"), None).await;
    assert_eq!(a.body["slack_user_id"], "U024BE7LH");
    view("User", &a.body);

    // A series with a moved and a cancelled occurrence: every field of a schedule.
    let path = format!("{base}/schedules/standup-1");
    let a = call(&kit, &doc, "PUT", &path, Some(json!(series))).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    view("WrittenSchedule", &a.body);
    let a = call(
        &kit,
        &doc,
        "PUT",
        &format!("{path}/occurrences/2030-01-21T09:00:00"),
        Some(json!(occurrence)),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let a = call(
        &kit,
        &doc,
        "DELETE",
        &format!("{path}/occurrences/2030-01-28T09:00:00"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let a = call(&kit, &doc, "GET", &path, None).await;
    assert_eq!(
        a.body["exceptions"].as_array().map(Vec::len),
        Some(2),
        "{}",
        a.body
    );
    view("Schedule", &a.body);
    let a = call(
        &kit,
        &doc,
        "GET",
        &format!("{path}/occurrences?from=2030-01-01T00:00:00Z&to=2030-03-01T00:00:00Z"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.body["occurrences"].as_array().unwrap().len() > 2);
    view("Occurrences", &a.body);

    // This and following, with something left before: both series shown.
    let mut following = series.clone();
    following.starts_at = "2030-02-04T14:00:00".into();
    // An EXDATE before the new start is outside the new series (a 422).
    following.recurrence.as_mut().unwrap().exdates.clear();
    let a = call(
        &kit,
        &doc,
        "PUT",
        &format!("{path}/occurrences/2030-02-04T09:00:00/following"),
        Some(json!({"new_id": "standup-2", "schedule": following})),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    view("SplitResult", &a.body);
    // A series with no end: listed up to a day before RFC 3339's last
    // instant, never into year 10000 (which no date-time can write).
    let spath2 = format!("{base}/schedules/forever");
    let mut forever = json!(series);
    forever["recurrence"]["rrule"] = json!("FREQ=DAILY");
    let a = call(&kit, &doc, "PUT", &spath2, Some(forever)).await;
    assert!(a.status.is_success(), "{}", a.body);
    let a = call(
        &kit,
        &doc,
        "GET",
        &format!("{spath2}/occurrences?from=9999-12-01T00:00:00"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let listed = a.body["occurrences"].as_array().unwrap();
    assert!(!listed.is_empty(), "{}", a.body);
    for o in listed {
        for field in ["original", "starts_at", "local_start"] {
            let at = o[field].as_str().unwrap();
            assert!(at.starts_with("9999-12-"), "{field} {at}");
        }
    }
    let a = call(
        &kit,
        &doc,
        "GET",
        &format!("{spath2}/occurrences?from=9999-12-31T23:59:59"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert_eq!(a.body["error"]["field"], "from", "{}", a.body);

    // A batch: one written, one refused (with its id), one without a valid id.
    let mut ghost = json!(series);
    ghost["participants"] = json!(["ghost"]);
    let mut item = json!(series);
    item["id"] = json!("standup-3");
    ghost["id"] = json!("standup-4");
    let a = call(
        &kit,
        &doc,
        "POST",
        &format!("{base}/schedules:batch"),
        Some(json!({"schedules": [item, ghost, {"id": "has space"}]})),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(
        (a.body["written"].clone(), a.body["failed"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(a.body["results"][1]["id"], "standup-4");
    view("BatchResult", &a.body);

    // An erasure: its counts as documented.
    let a = call(
        &kit,
        &doc,
        "DELETE",
        &format!("{base}/users/bob?erase=true"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    view("ErasedView", &a.body);

    // Errors, each as documented; field named where there is one.
    let a = call(
        &kit,
        &doc,
        "PUT",
        &format!("{base}/schedules/has%20space"),
        Some(json!(series)),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error"]["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("id"))
    );
    view("Error", &a.body);
    let a = call(&kit, &doc, "GET", &format!("{base}/users/nobody"), None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    view("Error", &a.body);

    // Templates: written (with a sample), read back, the default, listed, deleted.
    let tpl = format!("{base}/templates/mail/en-GB");
    let a = call(
        &kit,
        &doc,
        "PUT",
        &tpl,
        Some(json!(fully_populated_template())),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["locale"], "en-gb");
    assert_eq!(a.body["example"]["subject"], "[10 min] Weekly review");
    view("WrittenTemplate", &a.body);
    let a = call(&kit, &doc, "GET", &tpl, None).await;
    assert_eq!(a.body["source"], "tenant");
    view("Template", &a.body);
    // The tenant has no Slack template in Japanese: the resource is not
    // there (404), and the default it gets is at the built-in path.
    let a = call(
        &kit,
        &doc,
        "GET",
        &format!("{base}/templates/slack/ja"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert!(
        a.body["error"]["message"]
            .as_str()
            .is_some_and(|e| e.contains("/v1/templates/slack/ja")),
        "{}",
        a.body
    );
    let a = call(&kit, &doc, "GET", "/v1/templates/slack/ja", None).await;
    assert_eq!(
        (a.status, a.body["source"].clone()),
        (StatusCode::OK, json!("default"))
    );
    view("Template", &a.body);
    let a = call(&kit, &doc, "GET", "/v1/templates/slack/fr", None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    let a = call(&kit, &doc, "GET", &format!("{base}/templates"), None).await;
    assert_eq!(a.body["templates"].as_array().map(Vec::len), Some(1));
    view("Templates", &a.body);
    let a = call(
        &kit,
        &doc,
        "PUT",
        &format!("{base}/templates/slack/ja"),
        Some(json!({"text": "{{ titel }}"})),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error"]["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("text"))
    );
    let a = call(
        &kit,
        &doc,
        "PUT",
        &format!("{base}/templates/fax/ja"),
        Some(json!({"text": "x"})),
    )
    .await;
    assert_eq!(a.body["error"]["field"], "channel");
    let a = call(
        &kit,
        &doc,
        "GET",
        &format!("{base}/templates/chat/fr"),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "no French default");
    let a = call(&kit, &doc, "DELETE", &tpl, None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = call(&kit, &doc, "DELETE", &tpl, None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_all_seen(&seen);
}

#[tokio::test(start_paused = true)]
async fn malformed_requests_get_documented_errors_and_write_nothing() {
    let kit = kit_with_tenant().await;
    let doc = document(&kit).await;
    let path = "/v1/tenants/acme/users/ana";
    let user = json!({"name": "Ana"});
    // No content type: 415.
    let a = conforms(
        &doc,
        "PUT",
        path,
        send(
            &kit,
            Request::put(path)
                .header("authorization", format!("Bearer {KEY}"))
                .body(Body::from(user.to_string()))
                .unwrap(),
        )
        .await,
    );
    assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(a.body["error"]["code"], "unsupported_media_type");
    // Objects as arrays (serde's positional form), a mistyped field: 400.
    for bad in [
        json!(["Ana"]),
        json!({"name": "Ana", "locale": ["en"]}),
        json!({"name": 3}),
        json!({"name": "Ana", "nickname": "A"}),
    ] {
        let a = call(&kit, &doc, "PUT", path, Some(bad.clone())).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}: {}", a.body);
        assert_eq!(a.body["error"]["code"], "bad_json");
    }
    let a = call(
        &kit,
        &doc,
        "PUT",
        path,
        Some(json!({"name": "Ana", "nickname": "A"})),
    )
    .await;
    assert_eq!(a.body["error"]["field"], "nickname");
    // A schedule's nested objects as arrays; a whole number written 10.0 is 10.
    let schedule = json!({
        "title": "Stand-up", "starts_at": "2030-01-07T09:00:00+09:00", "participants": [],
        "reminders": [{"minutes_before": 10.0, "channels": ["mail"]}]
    });
    let spath = "/v1/tenants/acme/schedules/s1";
    for (pointer, array) in [
        ("/reminders/0", json!([10, ["mail"]])),
        ("/dst", json!([null, null])),
        ("/recurrence", json!(["FREQ=DAILY", []])),
    ] {
        let mut bad = schedule.clone();
        match bad.pointer_mut(pointer) {
            Some(v) => *v = array,
            None => bad[&pointer[1..]] = array,
        }
        let a = call(&kit, &doc, "PUT", spath, Some(bad)).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{pointer}: {}", a.body);
    }
    let a = call(&kit, &doc, "GET", spath, None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "nothing was written");
    let a = call(&kit, &doc, "PUT", spath, Some(schedule)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["reminders"][0]["minutes_before"], 10);
    // A query parameter twice: 400 in the API's shape, naming it.
    let a = call(
        &kit,
        &doc,
        "GET",
        &format!("{spath}/occurrences?from=a&from=b"),
        None,
    )
    .await;
    assert_eq!(
        (a.status, a.body["error"]["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("from"))
    );
    // Over the size limit: 413 naming the limit.
    let big = json!({"name": "x".repeat(api::MAX_BODY_BYTES)});
    let a = call(&kit, &doc, "PUT", path, Some(big)).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&api::MAX_BODY_BYTES.to_string()));
    let a = call(&kit, &doc, "GET", path, None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "nothing was written");
}

#[tokio::test(start_paused = true)]
async fn event_endpoint_answers_match_the_document() {
    let kit = kit_with_tenant().await;
    let doc = document(&kit).await;
    let base = "/v1/tenants/acme/event-endpoints";
    let input = json!({"url": "https://hooks.example/toki", "types": ["delivery.delivered"], "ordering": "unordered"});
    let a = call(
        &kit,
        &doc,
        "PUT",
        &format!("{base}/hook"),
        Some(input.clone()),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let a = call(&kit, &doc, "PUT", &format!("{base}/hook"), Some(input)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let bad = json!({"url": "gopher://x"});
    let a = call(&kit, &doc, "PUT", &format!("{base}/hook"), Some(bad)).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    for (method, path, body) in [
        ("GET", base.to_owned(), None),
        ("GET", format!("{base}/hook"), None),
        ("POST", format!("{base}/hook/secret:rotate"), None),
        ("POST", format!("{base}/hook/enable"), None),
        (
            "POST",
            format!("{base}/hook/replay"),
            Some(json!({"since": "2026-01-01T00:00:00Z"})),
        ),
        (
            "GET",
            "/v1/tenants/acme/events?after=0&limit=10".to_owned(),
            None,
        ),
    ] {
        let a = call(&kit, &doc, method, &path, body).await;
        assert_eq!(a.status, StatusCode::OK, "{method} {path}: {}", a.body);
    }
    let a = call(&kit, &doc, "GET", &format!("{base}/nope"), None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = call(&kit, &doc, "DELETE", &format!("{base}/hook"), None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
}
