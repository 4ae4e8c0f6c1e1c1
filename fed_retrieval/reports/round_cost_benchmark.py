"""Seconds, process-tree memory and bytes of one FedAwS or FedSS round against
the size of the label space.

A client's work and traffic depend on its key set (its classes, plus FedSS's
sampled negatives), not on the number of classes; the server holds the whole
table. The benchmark builds random clients (each with `classes_per_client`
classes and `points_per_client` points of `FEATURES_PER_POINT` random sparse
features), runs `warmup_rounds` rounds of the algorithm's process untimed
and times `repeats` more. Memory is the peak RSS of the whole process tree
during the rounds (`process_memory.ProcessTreePeak`: the Python process and the TFF
worker, where the computations run); run one configuration per process, as
`scripts.benchmark_round_cost` does.
"""

import hashlib
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import psutil

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import served_table
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.models import xc_encoder
from fed_retrieval.runtime import array_service
from fed_retrieval.runtime import process_memory
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.runtime import wire_bytes
from fed_retrieval.runtime import worker_threads
from fed_retrieval.training import round_calls
from fed_retrieval.training.loop_config import LoopConfig
from tasks import client_data

FEATURES_PER_POINT = 16
# The oracle is full softmax at other rates: the same round, measured once.
ALGORITHMS = fedaws.OWN_ALGORITHMS + fedss.ALGORITHMS
# Kinds of servers beside the workers, each stated per process.
SERVERS = ("spreadout_shards", "table_servers")


def random_clients(num_clients: int, points_per_client: int, classes_per_client: int,
                   num_classes: int, num_features: int, seed: int
                   ) -> client_data.ClientDatasets:
  """Clients of `classes_per_client` random classes and `points_per_client`
  points of `FEATURES_PER_POINT` random sparse features each."""
  rng = np.random.default_rng(seed)
  classes = np.stack([rng.choice(num_classes, classes_per_client, replace=False)
                      for _ in range(num_clients)])
  labels = np.take_along_axis(
      classes, rng.integers(0, classes_per_client, (num_clients, points_per_client)), 1)
  points = num_clients * points_per_client
  ids = rng.integers(1, num_features + 1, (points, FEATURES_PER_POINT)).astype(np.int32)
  values = rng.random((points, FEATURES_PER_POINT)).astype(np.float32)
  return client_data.ClientDatasets(
      (ids, values), labels.ravel().astype(np.int32),
      {str(i): np.arange(i * points_per_client, (i + 1) * points_per_client)
       for i in range(num_clients)})


def _process_and_bytes(model: xc_encoder.XCEncoderConfig, algorithm: str, bag: str,
                       num_negatives: int, classes_per_client: int, bag_rows: int,
                       seed: int, spreadout_search: str, sharded: bool):
  """(process builder, (bytes down, up) of a client with `bag_rows` bag rows)."""
  bag_rows = bag_rows if bag == "selected" else None
  if algorithm in fedss.ALGORITHMS:
    config = FedSSConfig(algorithm=algorithm, num_negatives=num_negatives,
                         positives_per_client=classes_per_client)
    return (lambda: fedss.build_xc_process(model, config, FEATURES_PER_POINT, seed, bag,
                                           sharded=sharded),
            fedss.bytes_per_client(model.weight_shapes(), model.num_labels,
                                   model.embedding_dim, config, bag_rows))
  config = FedAwSConfig(algorithm=algorithm, rows_per_client=classes_per_client,
                        spreadout_search=spreadout_search)
  return (lambda: fedaws.build_fedaws_process(model, config, FEATURES_PER_POINT, seed,
                                              bag, sharded=sharded),
          fedaws.bytes_per_client(model, config, bag_rows))


def _largest_bag(clients: client_data.ClientDatasets) -> int:
  """The most bag rows (distinct feature ids and padding) one client reads."""
  ids = clients.pooled()[0][0]  # Client after client.
  ends = np.cumsum([clients.num_examples(c) for c in clients.client_ids])
  return max(len(np.union1d(rows, [0])) for rows in np.split(ids, ends[:-1]))


def _spreadout_neighbours(model: xc_encoder.XCEncoderConfig,
                          clients: client_data.ClientDatasets, table: np.ndarray,
                          seed: int) -> Dict[str, float]:
  """The approximate neighbours (an index as the run keeps it: a function of
  the table) of the clients' classes against the exact ones: recall@k, and
  the mean cosine of a class to the neighbours each search found (on a table
  with no structure recall is low while the classes found are nearly as
  close: the push the spreadout takes is alike)."""
  held = np.unique(clients.pooled()[1])
  k = FedAwSConfig().spreadout_k
  index = class_neighbours.ApproximateNeighbours(
      xc_encoder.initial_class_table(model, seed), seed)
  found = index.nearest(None, table, held[:0], held, k)
  exact = class_neighbours.exact_nearest(table, held, k)
  unit = table / np.linalg.norm(table, axis=1, keepdims=True)

  def mean_cosine(neighbours):
    return round(float(np.einsum("nd,nkd->nk", unit[held], unit[neighbours]).mean()), 4)

  return {"recall": round(class_neighbours.recall_against_exact(found, exact), 4),
          "mean_cosine_found": mean_cosine(found), "mean_cosine_exact": mean_cosine(exact)}


def _cpu_seconds(process: psutil.Process) -> Tuple[float, float]:
  """(all, the kernel's) CPU seconds of `process` so far."""
  times = process.cpu_times()
  return times.user + times.system, times.system


def _per_process(seconds: Sequence[float], workers: int, servers: Dict[str, int]
                 ) -> Dict[str, List[float]]:
  """The workers' and each kind of server's of seconds listed driver,
  workers, then the servers of each kind of `servers` ({kind: count}) in
  turn; a kind none of runs is left out."""
  out, start = {"workers": [round(s, 3) for s in seconds[1:1 + workers]]}, 1 + workers
  for kind, count in servers.items():
    if count:
      out[kind] = [round(s, 3) for s in seconds[start:start + count]]
      start += count
  return out


def _wire_bytes_per_round(before, after, peers: Dict[str, List[str]],
                          repeats: int) -> Dict[str, List[int]]:
  """The bytes a round this process sent to (`to_<peer>`) and received from
  (`from_<peer>`) each of `peers` ({kind: addresses}; `wire_bytes`): on N
  machines, what each one's link carries, the driver's their sum."""
  out = {}
  for kind, addresses in peers.items():
    sent, received = zip(*(wire_bytes.between(before, after, a) for a in addresses))
    out[f"to_{kind}"] = [round(s / repeats) for s in sent]
    out[f"from_{kind}"] = [round(r / repeats) for r in received]
  return out


def _digest(weights) -> str:
  """SHA-1 of the weights' bytes: runs that trained alike to the last bit."""
  digest = hashlib.sha1()
  for w in weights:
    digest.update(np.ascontiguousarray(np.asarray(w, np.float32)).tobytes())
  return digest.hexdigest()


def next_round(process, state, data, settled: bool):
  """The state after a round of `process`; `settled`: with the spreadout
  index's moved rows placed (`class_neighbours.settle_moves`), which a run
  does in the background while the next round's calls run. Measuring each
  process alone (`one_call_at_a_time`), they are not left beside the next
  calls: a worker whose call ran beside the shards' placing took 14.0-14.2
  CPU s a round at Amazon-670K's shape (4,000 clients, one worker, 3 shards)
  against 11.5-12.1 with it settled, its kernel's part 2.0-2.2 s against
  0.7-1.0 (three runs each, alternated)."""
  state = process.next(state, data).state
  if settled:
    class_neighbours.settle_moves()
  return state


def worker_cpu_shares(runs: Sequence[Dict[str, Any]],
                      combine: Callable[[Sequence[float]], float] = max
                      ) -> List[Optional[float]]:
  """For each run on several workers, its workers' CPU seconds a round,
  `combine`d, over those of the one worker of the run at the same classes,
  spreadout shards and table servers; None for the rest. `max`: the busiest
  worker's share (what each of N machines would take of one's work); `sum`:
  the split's cost (1.0 when N workers do one's work between them and no
  more), so that the busiest's excess over sum / N is the calls' imbalance
  or the machine's noise, not the design's."""
  def kind(r):
    return r["num_classes"], r.get("spreadout_shards", 0), r.get("table_servers", 0)

  single = {kind(r): r["cpu_seconds_per_round"]["workers"][0]
            for r in runs if r["workers"] == 1}
  shares = []
  for r in runs:
    one = single.get(kind(r))
    shares.append(round(combine(r["cpu_seconds_per_round"]["workers"]) / one, 3)
                  if r["workers"] > 1 and one else None)
  return shares


def modelled_round(cpu: Dict[str, Any]) -> Dict[str, float]:
  """A round on W machines from a run's CPU seconds a round (its
  `cpu_seconds_per_round`, W workers): machine i runs worker i, and the
  spreadout shards j and table servers j with j mod W = i, and the round
  takes the driver's seconds plus the busiest machine's (the driver's fold
  of the uploads taken as in series with the calls, the calls' imbalance
  kept; the wall time of a 2-core machine cannot show it). Its `seconds` and
  the driver's share."""
  machines = list(cpu["workers"])
  for kind in SERVERS:
    for j, seconds in enumerate(cpu.get(kind, [])):
      machines[j % len(machines)] += seconds
  seconds = cpu["driver"] + max(machines)
  return {"seconds": round(seconds, 3), "driver_share": round(cpu["driver"] / seconds, 3)}


def round_benchmark(num_classes: int, algorithm: str = "fedss", bag: str = "selected",
                    num_negatives: int = 500,
                    num_features: int = 20_000, num_clients: int = 100,
                    points_per_client: int = 100, classes_per_client: int = 10,
                    batch_size: int = 16, repeats: int = 3, seed: int = 0,
                    spreadout_search: str = "exact", workers: int = 1,
                    client_shards: int = worker_threads.DEFAULT_CLIENT_SHARDS,
                    spreadout_shards: int = 0, one_call_at_a_time: bool = False,
                    warmup_rounds: Optional[int] = None,
                    table_servers: int = 0) -> Dict[str, Any]:
  """The figures of `repeats` timed rounds of `algorithm` (small architecture);
  bytes are the client with the most features' (`bag`: selected or whole).
  The clients are computed as a run computes them: in `client_shards` shards
  (`round_calls.round_datasets`; 0: a TFF client each).
  The first `warmup_rounds` rounds (default: `workers`) are not timed: the
  first traces and compiles, and a worker's CPU a call falls over its first
  calls, while on N workers each takes 1/N of a round's calls (at
  Amazon-670K's shape, 4,000 clients, the index on 3 shards: on 3 workers the
  busiest took 3.5 CPU s in the second round and 2.7-3.1 in each of the six
  after; one worker took 6.4-6.7 from the second on; one-off, by each
  round's /proc clocks).
  On `workers` local TFF workers (`tff_runtime.several_local_workers`; with
  `one_call_at_a_time`, taking their calls in turn, and the rows a round
  moved in the spreadout's index placed before the next round: `next_round`),
  the CPU seconds a round of this process (the driver, without the memory
  sampler's thread, stated apart) and of each worker, with the kernel's part
  of each worker's (where its page faults show: memory it hands back and
  touches again; not the driver's, which holds the sampler's reads of
  /proc), the bytes a round to and from each worker (`wire_bytes`: each
  machine's link), and a digest of the weights after the rounds (equal on any
  number of workers).
  With `spreadout_shards` (FedAwS, approximate), the index's lists live in
  as many local `scripts.spreadout_shard` processes, whose CPU seconds (and
  the kernel's) and bytes a round are stated too; with `table_servers`
  (FedSS), the class table is held in as many local `scripts.table_server`
  processes (`served_table`), stated alike, with each one's bytes a round to
  and from the workers. From the CPU seconds, the
  round on as many machines as workers (`modelled_round`).
  FedAwS's report adds how its spreadout found neighbours and, when
  approximately, how they compare with the exact search's on the final table,
  for every class the clients hold (`spreadout_neighbours`)."""
  if algorithm not in ALGORITHMS:
    raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, "
                     f"got '{algorithm}'")
  if workers < 1:
    raise ValueError(f"--workers must be >= 1, got {workers}")
  warmup_rounds = workers if warmup_rounds is None else warmup_rounds
  if warmup_rounds < 1:
    raise ValueError(f"--warmup_rounds must be >= 1, got {warmup_rounds}")
  if spreadout_shards and (algorithm != "fedaws" or spreadout_search != "approximate"):
    raise ValueError("--local_spreadout_shards: FedAwS with --spreadout_search="
                     "approximate only")
  if table_servers and algorithm != "fedss":
    raise ValueError("--local_table_servers: FedSS only (FedAwS's spreadout step reads "
                     "the whole table each round)")
  servers = {"spreadout_shards": spreadout_shards, "table_servers": table_servers}
  model = xc_encoder.XCEncoderConfig(num_features, num_classes, bag_dim=64,
                                     hidden_dims=(128,), embedding_dim=64)
  clients = random_clients(num_clients, points_per_client, classes_per_client,
                           num_classes, num_features, seed)
  data = round_calls.round_datasets(
      clients, clients.client_ids, LoopConfig(batch_size=batch_size, local_epochs=1),
      1, client_shards)
  build_process, (down, up) = _process_and_bytes(
      model, algorithm, bag, num_negatives, classes_per_client, _largest_bag(clients),
      seed, spreadout_search, client_shards > 0)
  with (tff_runtime.local_execution_context() if workers == 1 else
        tff_runtime.several_local_workers(workers, one_call_at_a_time)) as started, \
       array_service.LocalServers("scripts.spreadout_shard", spreadout_shards,
                                  tff_runtime.prepare_child) as shards, \
       array_service.LocalServers("scripts.table_server", table_servers,
                                  tff_runtime.prepare_child) as table, \
       process_memory.ProcessTreePeak() as peak:
    worker_list = [started] if workers == 1 else started
    processes = [psutil.Process()] + [psutil.Process(w.pid) for w in worker_list] + [
        psutil.Process(p.pid) for p in shards.processes + table.processes]
    peers = {"workers": [w.address for w in worker_list],
             **({"spreadout_shards": shards.addresses} if spreadout_shards else {}),
             **({"table_servers": table.addresses} if table_servers else {})}
    class_neighbours.use_remote_shards(shards.addresses)
    served_table.use_table_servers(table.addresses)
    try:
      process = build_process()
    finally:  # The process holds its shards and servers.
      class_neighbours.use_remote_shards([])
      served_table.use_table_servers([])
    state = process.initialize()
    for _ in range(warmup_rounds):
      state = next_round(process, state, data, one_call_at_a_time)
    # The spreadout index's rows moved by a round are placed in the
    # background: the window holds the timed rounds' placements, whole.
    class_neighbours.settle_moves()
    seconds, cpu_before = [], [_cpu_seconds(p) for p in processes]
    wire_before = wire_bytes.totals()
    served = [served_table.RemoteRange(a) for a in table.addresses]
    served_before = [s.traffic()[0] for s in served]
    sampler_before = peak.sampler_cpu_seconds()
    for _ in range(repeats):
      start = time.perf_counter()
      state = next_round(process, state, data, one_call_at_a_time)
      seconds.append(time.perf_counter() - start)
    class_neighbours.settle_moves()
    cpu_after = [_cpu_seconds(p) for p in processes]
    cpu, kernel = ([(after[i] - before[i]) / repeats
                    for after, before in zip(cpu_after, cpu_before)] for i in (0, 1))
    wire = _wire_bytes_per_round(wire_before, wire_bytes.totals(), peers, repeats)
    if served:  # Each table server's with the workers.
      moved = [(s.traffic()[0] - before) // repeats
               for s, before in zip(served, served_before)]
      wire["table_servers_to_workers"] = [int(m[0]) for m in moved]
      wire["table_servers_from_workers"] = [int(m[1]) for m in moved]
    # The memory sampler is a thread of this process: not the driver's work.
    sampler = (peak.sampler_cpu_seconds() - sampler_before) / repeats
    # Never below 0: the process's clock counts in ticks, the thread's finer.
    driver = max(cpu[0] - sampler, 0.0)
    weights = process.get_model_weights(state).trainable
  model_bytes = 4 * (sum(int(np.prod(s)) for s in model.weight_shapes()) +
                     num_classes * model.embedding_dim)
  oracle = algorithm == "full_softmax"  # The whole model.
  spreadout = {}
  if algorithm == "fedaws":
    spreadout = {"spreadout_search": spreadout_search}
    if spreadout_search == "approximate":
      spreadout["spreadout_neighbours"] = _spreadout_neighbours(
          model, clients, state["table"], seed)
  cpu_seconds = {"driver": round(driver, 3), "memory_sampler": round(sampler, 3),
                 **_per_process(cpu, workers, servers)}
  return {"algorithm": algorithm, "bag": "whole" if oracle else bag, **spreadout,
          "num_classes": num_classes, "workers": workers, "warmup_rounds": warmup_rounds,
          **({"one_call_at_a_time": True} if one_call_at_a_time and workers > 1 else {}),
          **{kind: count for kind, count in servers.items() if count},
          "cpu_seconds_per_round": cpu_seconds,
          "modelled_round": modelled_round(cpu_seconds),
          "kernel_cpu_seconds_per_round": _per_process(kernel, workers, servers),
          "wire_bytes_per_round": wire,
          "weights_sha1": _digest(weights),
          "num_features": num_features, "clients_per_round": num_clients,
          "tff_clients": len(data),
          "seconds_per_round_min": round(min(seconds), 3),
          "seconds_per_round_mean": round(float(np.mean(seconds)), 3),
          "memory": peak.report(),
          "bytes_down_per_client": int(down), "bytes_up_per_client": int(up),
          "model_bytes": model_bytes,
          "down_share_of_model": round(down / model_bytes, 5)}
