//! The tenant directory on DynamoDB: one item per tenant, partition key
//! `tenant` (S); attributes reminders_enabled (BOOL), active (BOOL), database
//! (S), api_keys (S, JSON: `toki_model::api_key::ApiKey`s). Items written
//! before several keys have api_key_sha256 (S) instead, read as the key
//! `default`; items written since carry it empty, so an older binary
//! rejects their keys rather than ignore a revocation.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use toki_model::api_key::{keys_from_stored, keys_to_stored};
use toki_model::{TenantId, TenantRecord};
use toki_ports::StoreResult;
use toki_ports::TenantDirectory;

use crate::error::{sdk, AwsError};
use crate::index::{get_s, s, FieldError};

pub struct DynamoTenantDirectory {
    client: Client,
    table: String,
}

impl DynamoTenantDirectory {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

fn get_bool(
    item: &HashMap<String, AttributeValue>,
    name: &'static str,
) -> Result<bool, FieldError> {
    match item.get(name) {
        Some(AttributeValue::Bool(b)) => Ok(*b),
        Some(other) => Err((name, format!("expected a boolean, got {other:?}"))),
        None => Err((name, "missing".into())),
    }
}

/// A string attribute that may be absent.
fn opt_s<'a>(
    item: &'a HashMap<String, AttributeValue>,
    name: &'static str,
) -> Result<Option<&'a str>, FieldError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v)),
        Some(other) => Err((name, format!("expected a string, got {other:?}"))),
    }
}

fn record(item: &HashMap<String, AttributeValue>) -> Result<TenantRecord, AwsError> {
    let parse = || -> Result<TenantRecord, FieldError> {
        Ok(TenantRecord {
            id: TenantId::parse_field("tenant", get_s(item, "tenant")?)
                .map_err(|e| ("tenant", e.to_string()))?,
            reminders_enabled: get_bool(item, "reminders_enabled")?,
            active: get_bool(item, "active")?,
            database: get_s(item, "database")?.to_owned(),
            api_keys: keys_from_stored(opt_s(item, "api_keys")?, opt_s(item, "api_key_sha256")?)
                .map_err(|e| ("api_keys", e))?,
            // JSON; absent on items written before change notices existed.
            change_notices: match item.get("change_notices") {
                None => Default::default(),
                Some(AttributeValue::S(json)) => {
                    serde_json::from_str(json).map_err(|e| ("change_notices", e.to_string()))?
                }
                Some(other) => {
                    return Err((
                        "change_notices",
                        format!("expected a string, got {other:?}"),
                    ))
                }
            },
            // JSON; absent when the contract sets no limits.
            limits: match item.get("limits") {
                None => Default::default(),
                Some(AttributeValue::S(json)) => {
                    serde_json::from_str(json).map_err(|e| ("limits", e.to_string()))?
                }
                Some(other) => return Err(("limits", format!("expected a string, got {other:?}"))),
            },
            // JSON; absent on items written before retention settings existed.
            retention: match item.get("retention") {
                None => Default::default(),
                Some(AttributeValue::S(json)) => {
                    let r: toki_model::retention::RetentionSettings =
                        serde_json::from_str(json).map_err(|e| ("retention", e.to_string()))?;
                    r.validate().map_err(|e| ("retention", e.to_string()))?;
                    r
                }
                Some(other) => {
                    return Err(("retention", format!("expected a string, got {other:?}")))
                }
            },
        })
    };
    parse().map_err(|(field, problem)| {
        AwsError::service(
            "directory",
            format!("corrupt tenant item: {field}: {problem}"),
        )
    })
}

/// BatchGetItem's bound on keys per request.
const BATCH_GET: usize = 100;

impl DynamoTenantDirectory {
    /// The records of up to 100 tenants, and the tenants DynamoDB left
    /// unprocessed.
    async fn batch(
        &self,
        chunk: &[TenantId],
    ) -> Result<(Vec<TenantRecord>, Vec<TenantId>), AwsError> {
        let keys = chunk
            .iter()
            .map(|t| HashMap::from([("tenant".to_owned(), s(t.as_str()))]))
            .collect();
        let read = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .map_err(|e| AwsError::service("BatchGetItem(tenants)", e.to_string()))?;
        let out = self
            .client
            .batch_get_item()
            .request_items(&self.table, read)
            .send()
            .await
            .map_err(|e| sdk("BatchGetItem(tenants)", e))?;
        let items = out.responses().and_then(|r| r.get(&self.table));
        let records = items
            .map(|items| items.iter().map(record).collect::<Result<Vec<_>, _>>())
            .transpose()?
            .unwrap_or_default();
        let unprocessed = out
            .unprocessed_keys()
            .and_then(|u| u.get(&self.table))
            .map(|k| k.keys())
            .unwrap_or_default()
            .iter()
            .filter_map(|key| key.get("tenant")?.as_s().ok()?.parse().ok())
            .collect();
        Ok((records, unprocessed))
    }
}

#[async_trait]
impl TenantDirectory for DynamoTenantDirectory {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>> {
        let resp = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("tenant", s(tenant.as_str()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("GetItem", e))?;
        Ok(resp.item.as_ref().map(record).transpose()?)
    }

    /// BatchGetItem, 100 keys a request (its bound), the requests together;
    /// keys DynamoDB leaves unprocessed (throttled) are read one by one.
    async fn get_many(&self, tenants: &[TenantId]) -> StoreResult<HashMap<TenantId, TenantRecord>> {
        let reads = tenants.chunks(BATCH_GET).map(|chunk| self.batch(chunk));
        let mut found = HashMap::with_capacity(tenants.len());
        for read in futures::future::join_all(reads).await {
            let (records, unprocessed) = read?;
            found.extend(records.into_iter().map(|r| (r.id.clone(), r)));
            for tenant in unprocessed {
                if let Some(r) = self.get(&tenant).await? {
                    found.insert(tenant, r);
                }
            }
        }
        Ok(found)
    }

    async fn put(&self, r: &TenantRecord) -> StoreResult<()> {
        let mut item = HashMap::from([
            ("tenant".to_owned(), s(r.id.as_str())),
            (
                "reminders_enabled".to_owned(),
                AttributeValue::Bool(r.reminders_enabled),
            ),
            ("active".to_owned(), AttributeValue::Bool(r.active)),
            ("database".to_owned(), s(r.database.as_str())),
            ("api_key_sha256".to_owned(), s("")),
            ("api_keys".to_owned(), s(keys_to_stored(&r.api_keys))),
            (
                "change_notices".to_owned(),
                s(serde_json::to_string(&r.change_notices).expect("settings serialise")),
            ),
            (
                "retention".to_owned(),
                s(serde_json::to_string(&r.retention).expect("retention serialises")),
            ),
        ]);
        if !r.limits.is_empty() {
            item.insert(
                "limits".to_owned(),
                s(serde_json::to_string(&r.limits).expect("limits serialise")),
            );
        }
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| sdk("PutItem", e))?;
        Ok(())
    }

    async fn delete(&self, tenant: &TenantId) -> StoreResult<bool> {
        let resp = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("tenant", s(tenant.as_str()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| sdk("DeleteItem", e))?;
        Ok(resp.attributes.is_some_and(|a| !a.is_empty()))
    }

    async fn list(&self) -> StoreResult<Vec<TenantRecord>> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| sdk("Scan", e))?;
            for item in resp.items() {
                out.push(record(item)?);
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}
