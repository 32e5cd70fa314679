//! The `tributary.v1.Lookup` service: checks each request, answers it from the
//! local and remote tables, and forwards what belongs to partitions held by
//! another instance (or names that instance when forwarding is off).

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant as StdInstant;

use bytes::Bytes;
use futures::Stream;
use serde_json::Value as Json;
use tonic::{Request, Response, Status};
use tributary_metrics::{StripedCounter, StripedHistogram};
use tributary_proto::grpc::served::ServedValue;
use tributary_proto::grpc::served::v1_served::lookup_server::Lookup;
use tributary_proto::grpc::served::v1_served::{BatchGetResponse, GetResponse, ScanRow};
use tributary_proto::grpc::v1::scan_request::Range;
use tributary_proto::grpc::v1::{
    self, BatchGetRequest, DescribeTableRequest, GetRequest, ListTablesRequest, ListTablesResponse,
    ScanRequest, TableInfo,
};
use tributary_proto::grpc::{from_json, to_json};

use crate::error::TableError;
use crate::grpc::call::{Admission, Call, within};
use crate::grpc::position::{MinPosition, wait_for};
use crate::grpc::routing::Routing;
use crate::local_table::{LocalTable, Located, Placement};
use crate::metrics::{GrpcLabel, MethodLabel, TablesMetrics};
use crate::progress::Progress;
use crate::remote::RemoteTable;
use tributary_table_api::{AsOf, KeyRange, LookupError, Table, TableDescription};

/// A table the API serves.
#[derive(Clone)]
enum Served {
    Local(Arc<LocalTable>),
    Remote(Arc<RemoteTable>),
}

impl Served {
    fn table(&self) -> &dyn Table {
        match self {
            Served::Local(t) => t.as_ref(),
            Served::Remote(t) => t.as_ref(),
        }
    }
}

/// What `Get` and `BatchGet` share: the table, the position, the time rows
/// are read as of, the method (for metrics).
struct KeysRequest<'a> {
    table: &'a str,
    min_position: Option<&'a v1::Position>,
    as_of_us: Option<i64>,
    method: &'static str,
}

/// Limits on what one request may ask for.
pub(crate) struct Limits {
    pub(crate) max_batch_keys: usize,
    pub(crate) max_scan_rows: usize,
}

/// The methods, as metrics label them: every name `observe` is called with
/// (each is exercised by `tests/lookup_api.rs`).
const METHODS: [&str; 5] = ["Get", "BatchGet", "Scan", "ListTables", "DescribeTable"];

/// A method's series for answered requests, looked up once: a family lookup per
/// request hashes the label and takes a lock.
struct Answered {
    ok: StripedCounter,
    seconds: StripedHistogram,
}

/// The service over one instance's tables.
pub(crate) struct LookupService {
    tables: BTreeMap<String, Served>,
    progress: Option<Arc<Progress>>,
    routing: Option<Arc<Routing>>,
    limits: Limits,
    admission: Admission,
    metrics: TablesMetrics,
    answered: BTreeMap<&'static str, Answered>,
}

/// Where the keys of one partitioned lookup go.
struct Split {
    /// Indices of keys held here, located.
    here: Vec<(usize, Located)>,
    /// The partitions that must be ready (and at the position asked) to answer
    /// them: theirs, or every partition of a global table.
    here_partitions: BTreeSet<i32>,
    /// Owner address → indices of its keys.
    elsewhere: BTreeMap<String, Vec<usize>>,
}

impl LookupService {
    pub(crate) fn new(
        local: &[Arc<LocalTable>],
        remote: &[Arc<RemoteTable>],
        progress: Option<Arc<Progress>>,
        routing: Option<Arc<Routing>>,
        limits: Limits,
        admission: Admission,
        metrics: TablesMetrics,
    ) -> Self {
        let local = local
            .iter()
            .map(|t| (t.name().to_owned(), Served::Local(t.clone())));
        let remote = remote
            .iter()
            .map(|t| (t.name().to_owned(), Served::Remote(t.clone())));
        let answered = METHODS
            .into_iter()
            .map(|method| {
                let ok = metrics
                    .grpc_requests
                    .get_or_create(&GrpcLabel {
                        method,
                        code: "Ok".to_owned(),
                    })
                    .clone();
                let seconds = metrics
                    .grpc_seconds
                    .get_or_create(&MethodLabel { method })
                    .clone();
                (method, Answered { ok, seconds })
            })
            .collect();
        LookupService {
            answered,
            tables: local.chain(remote).collect(),
            progress,
            routing,
            limits,
            admission,
            metrics,
        }
    }

    fn served(&self, name: &str) -> Result<&Served, Status> {
        self.tables.get(name).ok_or_else(|| {
            let known: Vec<&String> = self.tables.keys().collect();
            Status::not_found(format!("no table named {name:?} (tables here: {known:?})"))
        })
    }

    fn progress(&self) -> &Progress {
        self.progress
            .as_deref()
            .expect("local tables come with their progress")
    }

    /// Counts and times a request by method and status.
    async fn observe<T>(
        &self,
        method: &'static str,
        work: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let started = StdInstant::now();
        let result = work.await;
        let answered = &self.answered[method];
        match &result {
            Ok(_) => answered.ok.inc(),
            Err(status) => self
                .metrics
                .grpc_requests
                .get_or_create(&GrpcLabel {
                    method,
                    code: format!("{:?}", status.code()),
                })
                .inc(),
        };
        answered.seconds.observe(started.elapsed().as_secs_f64());
        result
    }

    fn forwarded(&self, method: &'static str) {
        let forwarded = self
            .metrics
            .grpc_forwarded
            .get_or_create(&MethodLabel { method });
        forwarded.inc();
    }

    /// The owner of a partition held elsewhere, if this request may go there.
    fn owner(&self, table: &str, partition: i32, call: &Call) -> Result<String, Status> {
        if call.forwarded {
            return Err(Status::unavailable(format!(
                "table {table}: partition {partition} was forwarded here but is not held here (its owner is changing; retry)"
            )));
        }
        let owner = self
            .routing
            .as_ref()
            .and_then(|r| r.owner_of(table, partition));
        match (owner, self.routing.as_ref().is_some_and(|r| r.forwards())) {
            (Some(owner), true) => Ok(owner),
            (Some(owner), false) => {
                let mut status = Status::failed_precondition(format!(
                    "table {table}: partition {partition} is held by {owner}; ask it"
                ));
                if let Ok(value) = owner.parse() {
                    status.metadata_mut().insert("x-tributary-owner", value);
                }
                Err(status)
            }
            (None, _) => Err(Status::unavailable(format!(
                "table {table}: partition {partition} is not held here and no instance announces it"
            ))),
        }
    }

    /// A held partition must have caught up before it answers.
    fn check_ready(&self, table: &str, partition: i32) -> Result<(), Status> {
        // Every lookup asks: answer from the progress in place; copy it only to explain a refusal.
        if self.progress().is_ready(table, partition) {
            return Ok(());
        }
        match self.progress().of_partition(table, partition) {
            Some(p) if p.ready => Ok(()),
            Some(p) if p.misplaced > 0 => Err(Status::unavailable(format!(
                "table {table}: partition {partition} received {} records that its partitioner \
                 puts elsewhere, so lookups would miss them: set the table's partitioner and \
                 key_format to the producer's, or declare it `mode: global`",
                p.misplaced
            ))),
            Some(p) => Err(Status::unavailable(format!(
                "table {table}: partition {partition} is still catching up ({} records behind)",
                p.lag()
            ))),
            None => Err(Status::unavailable(format!(
                "table {table}: partition {partition} was just released"
            ))),
        }
    }

    /// Splits a local table's keys by where their partitions are held.
    fn split(&self, table: &LocalTable, keys: &[Json], call: &Call) -> Result<Split, Status> {
        let mut split = Split {
            here: Vec::new(),
            here_partitions: BTreeSet::new(),
            elsewhere: BTreeMap::new(),
        };
        // Nothing materialized yet: every key is answered "not found".
        let Some(locator) = table.locator().map_err(status)? else {
            return Ok(split);
        };
        let held = table.held_partitions();
        for (i, key) in keys.iter().enumerate() {
            let located = locator.locate(key).map_err(status)?;
            match located.placement() {
                // A global table: every instance holds every row.
                Placement::Anywhere => {
                    split.here.push((i, located));
                    if split.here_partitions.is_empty() {
                        split
                            .here_partitions
                            .extend(0..table.partition_count() as i32);
                    }
                }
                Placement::Partition(p) if held.binary_search(&p).is_ok() => {
                    split.here.push((i, located));
                    split.here_partitions.insert(p);
                }
                Placement::Partition(p) => split
                    .elsewhere
                    .entry(self.owner(table.name(), p, call)?)
                    .or_default()
                    .push(i),
            }
        }
        Ok(split)
    }

    /// Looks up the keys of a local table held here (after readiness and
    /// position), as of a time if asked: `keys` are the request's, `split`
    /// says which of them are held here.
    async fn get_here(
        &self,
        table: &LocalTable,
        keys: &[Json],
        split: &Split,
        position: Option<&MinPosition>,
        as_of_us: Option<i64>,
        call: &Call,
    ) -> Result<Vec<GetResponse>, Status> {
        let (here, partitions) = (&split.here, &split.here_partitions);
        for &p in partitions {
            self.check_ready(table.name(), p)?;
        }
        if let Some(want) = position {
            let partitions: Vec<i32> = partitions.iter().copied().collect();
            wait_for(
                self.progress(),
                table.name(),
                &partitions,
                want,
                call.deadline,
            )
            .await?;
        }
        let Some(as_of) = as_of_us else {
            let located: Vec<&Located> = here.iter().map(|(_, l)| l).collect();
            return read_here(table, &located);
        };
        let mut results = Vec::with_capacity(here.len());
        for (i, _) in here {
            let read = table
                .get_json_bytes_as_of(&keys[*i], as_of)
                .map_err(status)?;
            results.push(match read.answer {
                AsOf::Row(row) => found(Some(parse_row(table, &row)?)),
                AsOf::Absent => found(None),
                AsOf::BeyondHistory { horizon } => GetResponse {
                    beyond_history: true,
                    history_horizon_us: horizon,
                    ..GetResponse::default()
                },
            });
        }
        Ok(results)
    }

    async fn answer_get(&self, request: Request<GetRequest>) -> Result<GetResponse, Status> {
        let call = self.admission.admit(&request).await?;
        let GetRequest {
            table,
            key,
            min_position,
            as_of_us,
        } = request.into_inner();
        let key = json_field(key.as_ref(), "key")?;
        if min_position.is_none()
            && as_of_us.is_none()
            && let Served::Local(local) = self.served(&table)?
            && let Some(located) = local.locate(&key).map_err(status)?
            && self.ready_here(local, &located)
        {
            let mut rows = read_here(local, &[&located])?;
            return Ok(rows.pop().expect("one row per key"));
        }
        let lookup = KeysRequest {
            table: &table,
            min_position: min_position.as_ref(),
            as_of_us,
            method: "Get",
        };
        // Boxed: the common case above keeps a small future.
        let mut rows = Box::pin(self.get_keys(&lookup, vec![key], &call)).await?;
        Ok(rows.pop().expect("one row per key"))
    }

    /// Whether a key's row can be read here at once: its partition (every
    /// partition, for a global table) is held and ready. When not, the general
    /// path forwards the key or says why it cannot be answered.
    fn ready_here(&self, table: &LocalTable, key: &Located) -> bool {
        let progress = self.progress();
        match key.placement() {
            Placement::Anywhere => {
                (0..table.partition_count() as i32).all(|p| progress.is_ready(table.name(), p))
            }
            Placement::Partition(p) => progress.is_ready(table.name(), p),
        }
    }

    async fn answer_batch_get(
        &self,
        request: Request<BatchGetRequest>,
    ) -> Result<BatchGetResponse, Status> {
        let call = self.admission.admit(&request).await?;
        let batch = request.into_inner();
        if batch.keys.len() > self.limits.max_batch_keys {
            return Err(Status::invalid_argument(format!(
                "{} keys exceed the batch limit of {} (grpc.max_batch_keys)",
                batch.keys.len(),
                self.limits.max_batch_keys
            )));
        }
        let keys = batch
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| json_value(k, || format!("keys[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let lookup = KeysRequest {
            table: &batch.table,
            min_position: batch.min_position.as_ref(),
            as_of_us: batch.as_of_us,
            method: "BatchGet",
        };
        let results = self.get_keys(&lookup, keys, &call).await?;
        Ok(BatchGetResponse { results })
    }

    /// Answers `keys` of a table, forwarding the keys held elsewhere.
    async fn get_keys(
        &self,
        request: &KeysRequest<'_>,
        keys: Vec<Json>,
        call: &Call,
    ) -> Result<Vec<GetResponse>, Status> {
        let position = MinPosition::from_request(request.min_position)?;
        let table = match self.served(request.table)? {
            Served::Remote(table) => {
                if position.is_some() {
                    return Err(Status::invalid_argument(format!(
                        "table {}: a remote table has no source position to wait for",
                        request.table
                    )));
                }
                if request.as_of_us.is_some() {
                    return Err(Status::invalid_argument(format!(
                        "table {}: a remote table keeps no history to read as of a time",
                        request.table
                    )));
                }
                let rows = within(call.deadline, "remote lookup", async {
                    table.multi_get(&keys).await.map_err(status)
                })
                .await?;
                return Ok(rows
                    .iter()
                    .map(|row| found(row.as_ref().map(|row| from_json(row).into())))
                    .collect());
            }
            Served::Local(table) => table,
        };
        let split = self.split(table, &keys, call)?;
        let mut results: Vec<GetResponse> = vec![found(None); keys.len()];
        let here = self.get_here(
            table,
            &keys,
            &split,
            position.as_ref(),
            request.as_of_us,
            call,
        );
        let there = split.elsewhere.iter().map(|(owner, indices)| {
            let keys: Vec<v1::Value> = indices.iter().map(|i| from_json(&keys[*i])).collect();
            let message = BatchGetRequest {
                table: request.table.to_owned(),
                keys,
                min_position: request.min_position.cloned(),
                as_of_us: request.as_of_us,
            };
            self.forwarded(request.method);
            self.forward_batch(owner, message, call)
        });
        let (here, there) = tokio::join!(here, futures::future::try_join_all(there));
        for ((i, _), result) in split.here.iter().zip(here?) {
            results[*i] = result;
        }
        for ((_, indices), answer) in split.elsewhere.iter().zip(there?) {
            for (i, result) in indices.iter().zip(answer.results) {
                results[*i] = forwarded_result(result);
            }
        }
        Ok(results)
    }

    async fn forward_batch(
        &self,
        owner: &str,
        message: BatchGetRequest,
        call: &Call,
    ) -> Result<v1::BatchGetResponse, Status> {
        let routing = self.routing.as_ref().expect("owners come from routing");
        let mut client = routing.client(owner)?;
        let answer = client
            .batch_get(routing.request(message, call.deadline))
            .await
            .map_err(|s| forwarded_status(owner, s))?;
        Ok(answer.into_inner())
    }

    async fn answer_scan(&self, request: Request<ScanRequest>) -> Result<Vec<ScanRow>, Status> {
        let call = self.admission.admit(&request).await?;
        let scan = request.into_inner();
        let limit = match scan.limit as usize {
            0 => self.limits.max_scan_rows,
            n if n <= self.limits.max_scan_rows => n,
            n => {
                return Err(Status::invalid_argument(format!(
                    "limit {n} exceeds the scan limit of {} (grpc.max_scan_rows)",
                    self.limits.max_scan_rows
                )));
            }
        };
        let range = match &scan.range {
            None => KeyRange::all(),
            Some(Range::Prefix(prefix)) => KeyRange::Prefix(json_field(Some(prefix), "prefix")?),
            Some(Range::Between(between)) => KeyRange::Between {
                from: between
                    .from
                    .as_ref()
                    .map(|v| json_field(Some(v), "between.from"))
                    .transpose()?,
                to: between
                    .to
                    .as_ref()
                    .map(|v| json_field(Some(v), "between.to"))
                    .transpose()?,
            },
        };
        let position = MinPosition::from_request(scan.min_position.as_ref())?;
        let table = match self.served(&scan.table)? {
            Served::Remote(_) => {
                return Err(Status::unimplemented(format!(
                    "table {}: remote tables answer point lookups only",
                    scan.table
                )));
            }
            Served::Local(table) => table,
        };
        if position
            .as_ref()
            .is_some_and(MinPosition::names_a_transaction)
        {
            return Err(Status::invalid_argument(
                "min_position.gtid and min_position.wal apply to the keys their transaction \
                 wrote; pass offsets to scan",
            ));
        }
        let held: Vec<i32> = self
            .progress()
            .of_table(table.name())
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        for &p in &held {
            self.check_ready(table.name(), p)?;
        }
        if let Some(want) = &position {
            wait_for(self.progress(), table.name(), &held, want, call.deadline).await?;
        }
        let mut rows = table
            .scan_stored(&range, limit)
            .map_err(status)?
            .into_iter()
            .map(|(key, raw)| Ok((key, parse_row(table, &raw)?)))
            .collect::<Result<Vec<_>, Status>>()?;
        // Partitions held elsewhere: ask their owners (unless this scan was
        // forwarded here for the partitions held here), then merge in key order.
        let mut owners = BTreeSet::new();
        if !call.forwarded {
            for p in 0..table.describe().await.partition_count as i32 {
                if !held.contains(&p) {
                    owners.insert(self.owner(table.name(), p, &call)?);
                }
            }
        }
        if !owners.is_empty() {
            let asks = owners.iter().map(|owner| {
                self.forwarded("Scan");
                self.forward_scan(owner, scan.clone(), &call)
            });
            for remote_rows in futures::future::try_join_all(asks).await? {
                rows.extend(remote_rows);
            }
            let mut keyed = rows
                .into_iter()
                .map(|(key, row)| Ok((table.sort_key(&key).map_err(status)?, key, row)))
                .collect::<Result<Vec<_>, Status>>()?;
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            rows = keyed.into_iter().map(|(_, k, r)| (k, r)).collect();
            rows.truncate(limit);
        }
        Ok(rows
            .into_iter()
            .map(|(key, row)| ScanRow {
                key: Some(from_json(&key).into()),
                row: Some(row),
            })
            .collect())
    }

    async fn forward_scan(
        &self,
        owner: &str,
        scan: ScanRequest,
        call: &Call,
    ) -> Result<Vec<(Json, ServedValue)>, Status> {
        let routing = self.routing.as_ref().expect("owners come from routing");
        let mut client = routing.client(owner)?;
        let mut stream = client
            .scan(routing.request(scan, call.deadline))
            .await
            .map_err(|s| forwarded_status(owner, s))?
            .into_inner();
        let mut rows = Vec::new();
        while let Some(row) = stream
            .message()
            .await
            .map_err(|s| forwarded_status(owner, s))?
        {
            let key =
                json_field(row.key.as_ref(), "key").map_err(|s| forwarded_status(owner, s))?;
            let value = row.row.ok_or_else(|| {
                forwarded_status(owner, Status::invalid_argument("row is required"))
            })?;
            rows.push((key, ServedValue::Tree(value)));
        }
        Ok(rows)
    }

    async fn describe(&self, name: &str) -> Result<TableInfo, Status> {
        Ok(table_info(self.served(name)?.table().describe().await))
    }
}

type ScanStream = Pin<Box<dyn Stream<Item = Result<ScanRow, Status>> + Send>>;

#[tonic::async_trait]
impl Lookup for LookupService {
    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        self.observe("Get", self.answer_get(request))
            .await
            .map(Response::new)
    }

    async fn batch_get(
        &self,
        request: Request<BatchGetRequest>,
    ) -> Result<Response<BatchGetResponse>, Status> {
        self.observe("BatchGet", self.answer_batch_get(request))
            .await
            .map(Response::new)
    }

    type ScanStream = ScanStream;

    async fn scan(&self, request: Request<ScanRequest>) -> Result<Response<ScanStream>, Status> {
        let rows = self.observe("Scan", self.answer_scan(request)).await?;
        let stream: ScanStream = Box::pin(futures::stream::iter(rows.into_iter().map(Ok)));
        Ok(Response::new(stream))
    }

    async fn list_tables(
        &self,
        request: Request<ListTablesRequest>,
    ) -> Result<Response<ListTablesResponse>, Status> {
        self.observe("ListTables", async {
            let _call = self.admission.admit(&request).await?;
            let mut tables = Vec::new();
            for name in self.tables.keys() {
                tables.push(self.describe(name).await?);
            }
            Ok(ListTablesResponse { tables })
        })
        .await
        .map(Response::new)
    }

    async fn describe_table(
        &self,
        request: Request<DescribeTableRequest>,
    ) -> Result<Response<TableInfo>, Status> {
        self.observe("DescribeTable", async {
            let _call = self.admission.admit(&request).await?;
            self.describe(&request.get_ref().table).await
        })
        .await
        .map(Response::new)
    }
}

/// Reads the rows of keys held here as encoded API values: from the store's
/// cache of encoded rows, else from their stored JSON bytes with no tree
/// between.
fn read_here(table: &LocalTable, keys: &[&Located]) -> Result<Vec<GetResponse>, Status> {
    let rows = table
        .read_derived(keys, |raw| encode_row(table, raw))
        .map_err(status)?;
    Ok(rows
        .into_iter()
        .map(|row| found(row.map(ServedValue::Encoded)))
        .collect())
}

fn encode_row(table: &LocalTable, raw: &[u8]) -> Result<Bytes, LookupError> {
    served_row(table, raw).map(ServedValue::into_encoded)
}

fn parse_row(table: &LocalTable, raw: &[u8]) -> Result<ServedValue, Status> {
    served_row(table, raw).map_err(status)
}

fn served_row(table: &LocalTable, raw: &[u8]) -> Result<ServedValue, LookupError> {
    ServedValue::from_json_slice(raw).map_err(|e| LookupError::Corrupt {
        table: table.name().to_owned(),
        problem: e.to_string(),
    })
}

fn found(row: Option<ServedValue>) -> GetResponse {
    GetResponse {
        found: row.is_some(),
        row,
        ..GetResponse::default()
    }
}

/// An answer of the key's owner, as this server sends it on.
fn forwarded_result(result: v1::GetResponse) -> GetResponse {
    GetResponse {
        found: result.found,
        row: result.row.map(ServedValue::Tree),
        beyond_history: result.beyond_history,
        history_horizon_us: result.history_horizon_us,
    }
}

/// A required JSON value of a request, or `INVALID_ARGUMENT` naming the field.
fn json_field(value: Option<&v1::Value>, field: &str) -> Result<Json, Status> {
    let value = value.ok_or_else(|| Status::invalid_argument(format!("{field} is required")))?;
    json_value(value, || field.to_owned())
}

/// A JSON value of a request, or `INVALID_ARGUMENT` naming the field (named
/// only then: a batch's keys are many).
fn json_value(value: &v1::Value, field: impl FnOnce() -> String) -> Result<Json, Status> {
    to_json(value).map_err(|e| {
        // `$` is the field itself: `key.price: …`, `key: …`.
        let within = e.at.strip_prefix('$').unwrap_or(&e.at);
        Status::invalid_argument(format!("{}{within}: {}", field(), e.problem))
    })
}

/// A table error as the status a client can act on.
fn status(error: impl Into<TableError>) -> Status {
    let error = error.into();
    let message = error.to_string();
    match error {
        TableError::Lookup(lookup) => match lookup {
            LookupError::BadKey { .. } => Status::invalid_argument(message),
            LookupError::NotOwned { .. } | LookupError::Unavailable { .. } => {
                Status::unavailable(message)
            }
            LookupError::Unsupported { .. } => Status::unimplemented(message),
            LookupError::Corrupt { .. } | LookupError::Storage { .. } => Status::internal(message),
        },
        TableError::UnknownTable(_) => Status::not_found(message),
        TableError::Partitioning { .. } => Status::failed_precondition(message),
        _ => Status::internal(message),
    }
}

/// An error of a forwarded request, saying which instance answered it.
fn forwarded_status(owner: &str, status: Status) -> Status {
    Status::new(
        status.code(),
        format!("forwarded to {owner}: {}", status.message()),
    )
}

fn table_info(d: TableDescription) -> TableInfo {
    let partitions: Vec<v1::PartitionInfo> = d
        .partitions
        .iter()
        .map(|p| v1::PartitionInfo {
            partition: p.partition,
            next_offset: p.next_offset,
            end_offset: p.latest_end.unwrap_or(-1),
            ready: p.ready,
            rows_estimate: p.rows_estimate,
            lag: p.lag,
            applied_gtids: p.applied_gtids.clone(),
            applied_lsn: p.applied_lsn.clone().unwrap_or_default(),
            misplaced_records: p.misplaced_records,
        })
        .collect();
    TableInfo {
        ready: d.kind == "remote" || (!partitions.is_empty() && partitions.iter().all(|p| p.ready)),
        rows_estimate: d.rows_estimate,
        global: d.global,
        lag: partitions.iter().map(|p| p.lag).sum(),
        name: d.name,
        kind: d.kind.to_owned(),
        topic: d.topic,
        key_columns: d.key_columns,
        partition_count: d.partition_count,
        partitions,
    }
}
