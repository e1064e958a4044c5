//! What the DynamoDB index table holds of a tenant, and its removal
//! (offboarding). Its rows are keyed by due minute, so a tenant's are found
//! by a scan, paged (at most [`PAGE`] items a request) and filtered here:
//! index rows (`tenant`), version markers (`V#<tenant>#…`), debounce rows
//! (`D#<tenant>:…`), the tenant's own lease rows (`L#tenantdb:<tenant>`,
//! `L#tenant:<tenant>:…`), its work marks (`W#<kind>`, `sk` = the tenant)
//! and the repair cursor when it points at the tenant.
//! An operation for offboarding only: never on a delivery's path.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use futures::stream::{self, StreamExt};

use toki_model::TenantId;
use toki_ports::offboard::{is_tenants_debounce_key, is_tenants_lease_key, Holding};
use toki_ports::{StoreResult, TenantFootprint};

use crate::error::sdk;

/// Items read per Scan request.
pub const PAGE: i32 = 500;

type Item = HashMap<String, AttributeValue>;

/// The index table's items of one tenant.
pub struct DynamoIndexFootprint {
    client: Client,
    table: String,
}

impl DynamoIndexFootprint {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoIndexFootprint {
            client,
            table: table.into(),
        }
    }

    /// (pk, sk, place) of every item of the tenant.
    async fn items(&self, tenant: &TenantId) -> StoreResult<Vec<(String, String, &'static str)>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(&self.table)
                .limit(PAGE)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| sdk("Scan(offboarding)", e))?;
            for item in resp.items() {
                if let (Some(place), Some(pk), Some(sk)) =
                    (place_of(item, tenant), text(item, "pk"), text(item, "sk"))
                {
                    out.push((pk.to_owned(), sk.to_owned(), place));
                }
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v),
        _ => None,
    }
}

/// Which of the tenant's kinds of item this is, if it is the tenant's.
pub fn place_of(item: &Item, tenant: &TenantId) -> Option<&'static str> {
    let pk = text(item, "pk")?;
    let t = tenant.as_str();
    if text(item, "tenant") == Some(t) {
        return Some("dynamodb.index_rows");
    }
    if pk
        .strip_prefix("V#")
        .and_then(|k| k.strip_prefix(t))
        .is_some_and(|r| r.starts_with('#'))
    {
        return Some("dynamodb.index_versions");
    }
    if pk
        .strip_prefix("D#")
        .is_some_and(|k| is_tenants_debounce_key(k, tenant))
    {
        return Some("dynamodb.debounce");
    }
    if pk
        .strip_prefix("L#")
        .is_some_and(|k| is_tenants_lease_key(k, tenant))
    {
        return Some("dynamodb.rate_leases");
    }
    if pk.starts_with(crate::marks::PK_PREFIX) && text(item, "sk") == Some(t) {
        return Some("dynamodb.work_marks");
    }
    if pk == "C#repair" && text(item, "next_tenant") == Some(t) {
        return Some("dynamodb.repair_cursor");
    }
    None
}

fn counted(items: &[(String, String, &'static str)]) -> Vec<Holding> {
    let mut by: std::collections::BTreeMap<&str, u64> = [
        "dynamodb.index_rows",
        "dynamodb.index_versions",
        "dynamodb.debounce",
        "dynamodb.rate_leases",
        "dynamodb.repair_cursor",
        "dynamodb.work_marks",
    ]
    .into_iter()
    .map(|p| (p, 0))
    .collect();
    for (_, _, place) in items {
        *by.entry(place).or_default() += 1;
    }
    by.into_iter().map(|(p, n)| Holding::new(p, n)).collect()
}

#[async_trait]
impl TenantFootprint for DynamoIndexFootprint {
    async fn holdings(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        Ok(counted(&self.items(tenant).await?))
    }

    async fn delete_tenant(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        let items = self.items(tenant).await?;
        let requests: Vec<_> = items
            .iter()
            .map(|(pk, sk, _)| {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .key("pk", AttributeValue::S(pk.clone()))
                    .key("sk", AttributeValue::S(sk.clone()))
            })
            .collect();
        let deletes: Vec<_> = stream::iter(requests.into_iter().map(|r| r.send()))
            .buffer_unordered(16)
            .collect()
            .await;
        for d in deletes {
            d.map_err(|e| sdk("DeleteItem(offboarding)", e))?;
        }
        Ok(counted(&items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, &str)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), AttributeValue::S(v.to_string())))
            .collect()
    }

    #[test]
    fn finds_each_kind_of_item_of_the_tenant_and_no_other_tenants() {
        let acme: TenantId = "acme".parse().unwrap();
        let cases = [
            (
                item(&[
                    ("pk", "R#2026-11-23T08:55#07"),
                    ("sk", "x"),
                    ("tenant", "acme"),
                ]),
                Some("dynamodb.index_rows"),
            ),
            (
                item(&[
                    ("pk", "R#2026-11-23T08:55#07"),
                    ("sk", "x"),
                    ("tenant", "acme-corp"),
                ]),
                None,
            ),
            (
                item(&[("pk", "V#acme#review"), ("sk", "version")]),
                Some("dynamodb.index_versions"),
            ),
            (
                item(&[("pk", "V#acme-corp#review"), ("sk", "version")]),
                None,
            ),
            (
                item(&[("pk", "D#acme:review"), ("sk", "state")]),
                Some("dynamodb.debounce"),
            ),
            (item(&[("pk", "D#acmex:review"), ("sk", "state")]), None),
            (
                item(&[("pk", "L#tenantdb:acme"), ("sk", "p#0000")]),
                Some("dynamodb.rate_leases"),
            ),
            (
                item(&[("pk", "L#tenant:acme:slack"), ("sk", "p#0001")]),
                Some("dynamodb.rate_leases"),
            ),
            (item(&[("pk", "L#slack:T1"), ("sk", "p#0000")]), None),
            (
                item(&[
                    ("pk", "C#repair"),
                    ("sk", "cursor"),
                    ("next_tenant", "acme"),
                ]),
                Some("dynamodb.repair_cursor"),
            ),
            (
                item(&[
                    ("pk", "C#repair"),
                    ("sk", "cursor"),
                    ("next_tenant", "globex"),
                ]),
                None,
            ),
        ];
        for (item, want) in cases {
            assert_eq!(place_of(&item, &acme), want, "{item:?}");
        }
    }
}
