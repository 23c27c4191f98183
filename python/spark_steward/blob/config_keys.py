"""The blob capability's ``spark.steward.blob.*`` keys.

Declared here, listed with every other key by :data:`spark_steward.config.KEYS` (this module is
the ``config`` of the capability's declaration), and read typed through
:meth:`spark_steward.config.StewardConf.get`.
"""

from __future__ import annotations

import math

from spark_steward.config import (BOOL, DURATION, INT, SIZE, STRING, ConfigKey, JvmValue,
                                  StewardConf)

BLOB_RETENTION_INTERVAL = ConfigKey(
    "spark.steward.blob.retention.interval", DURATION, "30min",
    "Staged cleanup period of blobs (FLIP-19 `blob.retention.interval`): an unreferenced blob, "
    "and a blob put before any job used it, stays at least this long and at most twice this "
    "long; re-use in that window rescues it.", minimum=0.001)
BLOB_HA = ConfigKey(
    "spark.steward.blob.ha", BOOL, "true",
    "When the storage dir is set explicitly, every blob is also written there (HA "
    "copy) before its put returns, and executors read it from there before asking the driver. "
    "The embedded default storage is never used for HA copies.")
BLOB_SERVER_PORT = ConfigKey(
    "spark.steward.blob.server.port", INT, "0",
    "Port of the driver's blob server (0 picks a free one). It listens on "
    "`spark.driver.bindAddress` (else `spark.driver.host`) and executors dial "
    "`spark.driver.host` at this port: behind NAT, forward it like `spark.driver.port`.",
    minimum=0)
BLOB_SERVER_MAX_CONNECTIONS = ConfigKey(
    "spark.steward.blob.server.max-connections", INT, "256",
    "Most concurrent authenticated blob server connections; more are refused with an error "
    "reply.", minimum=1)
BLOB_SERVER_MAX_UNAUTHENTICATED = ConfigKey(
    "spark.steward.blob.server.max-unauthenticated", INT, "64",
    "Most connections still in the handshake, counted apart from `max-connections`; when full, "
    "the oldest is dropped to admit a new one, so idle sockets cannot lock executors out.",
    minimum=1)
BLOB_SERVER_MAX_UNAUTHENTICATED_PER_PEER = ConfigKey(
    "spark.steward.blob.server.max-unauthenticated-per-peer", INT, "8",
    "Most connections one peer address may hold in the handshake; its oldest is dropped "
    "beyond that.", minimum=1)
BLOB_ENCRYPTION = ConfigKey(
    "spark.steward.blob.encryption", STRING, "auto",
    "TLS 1.3 for blob transfers, with a certificate the driver makes for the application and "
    "executors pin: `auto` (on when Spark's own transfers are encrypted: "
    "`spark.network.crypto.enabled`, `spark.ssl.enabled` or `spark.ssl.rpc.enabled`), `true` "
    "or `false`.", choices=("auto", "true", "false"))
BLOB_SERVER_HANDSHAKE_TIMEOUT = ConfigKey(
    "spark.steward.blob.server.handshake-timeout", DURATION, "5s",
    "Time a new connection has to prove the application's secret, apart from the transfer "
    "timeout (`network-timeout`).", minimum=0.05)
BLOB_SERVER_MAX_FRAME = ConfigKey(
    "spark.steward.blob.server.max-frame", SIZE, "64k",
    "Largest request frame the blob server reads; a larger declared length gets an error reply "
    "and the connection is closed.", minimum=256)
BLOB_NETWORK_TIMEOUT = ConfigKey(
    "spark.steward.blob.network-timeout", DURATION, "60s",
    "Socket timeout of blob server connections on both sides.", minimum=0.01)
BLOB_FETCH_ATTEMPTS = ConfigKey(
    "spark.steward.blob.fetch.attempts", INT, "3",
    "How often an executor tries each source (HA store, blob server) before a blob read fails.",
    minimum=1)
BLOB_SAME_HOST_LINK = ConfigKey(
    "spark.steward.blob.cache.same-host-link", BOOL, "true",
    "Executors on the driver's host hard-link the driver's verified copy into their cache "
    "instead of transferring it (then verify it like any other copy). `false` makes them use "
    "the HA store and the blob server as on any other host.")
BLOB_PEER_ENABLED = ConfigKey(
    "spark.steward.blob.peer.enabled", BOOL, "true",
    "Executor hosts fetch blobs of at least `peer.min-bytes` in pieces from each other and from "
    "the driver at once, each piece checked (crc32c) and the whole blob against its key; every "
    "executor JVM serves the verified pieces its host holds. `false`: every host fetches the "
    "whole blob from the HA store or the blob server.")
BLOB_PEER_MIN_BYTES = ConfigKey(
    "spark.steward.blob.peer.min-bytes", SIZE, "16m",
    "Smallest blob fetched from peers; smaller ones come whole from one source.", minimum=0)
BLOB_PEER_CONNECTIONS = ConfigKey(
    "spark.steward.blob.peer.connections", INT, "4",
    "Peers one host fetches pieces from at once (besides the driver).", minimum=1)
BLOB_PEER_MAX_CONNECTIONS = ConfigKey(
    "spark.steward.blob.peer.max-connections", INT, "16",
    "Most authenticated connections each executor's peer server serves at once; more are "
    "refused with a `busy` reply and fetch elsewhere.", minimum=1)
BLOB_PEER_RATE = ConfigKey(
    "spark.steward.blob.peer.rate", SIZE, "0",
    "Upload cap of each executor's peer server in bytes per second (`0`: none), so serving "
    "peers leaves room for the executor's shuffle traffic.", minimum=0)
BLOB_TRANSPARENT = ConfigKey(
    "spark.steward.blob.transparent", BOOL, "true",
    "Routes `sc.addFile`, `sc.addArchive` and `SparkFiles.get` of sessions with spark-steward on "
    "through the blob service (verified, cached, cleaned up).")


def encryption_on(conf: StewardConf) -> bool:
    """Whether blob transfers are encrypted: ``spark.steward.blob.encryption``, whose ``auto``
    follows Spark's own transfers (:attr:`StewardConf.spark_encrypts`)."""
    mode = conf.get(BLOB_ENCRYPTION)
    return conf.spark_encrypts if mode == "auto" else mode == "true"


def _millis(seconds: float) -> int:
    """Whole milliseconds, rounded up: a timeout never becomes shorter than what was asked."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))


#: What every executor JVM's peer server acts on (the shim's ``blob.PeerSettings``).
JVM_VALUES = (
    JvmValue("blob_peer_enabled", bool, lambda conf: conf.get(BLOB_PEER_ENABLED)),
    JvmValue("blob_peer_max_connections", int, lambda conf: conf.get(BLOB_PEER_MAX_CONNECTIONS)),
    JvmValue("blob_peer_rate", int, lambda conf: conf.get(BLOB_PEER_RATE)),
    JvmValue("blob_network_timeout_ms", int,
             lambda conf: _millis(conf.get(BLOB_NETWORK_TIMEOUT))),
    JvmValue("blob_handshake_timeout_ms", int,
             lambda conf: _millis(conf.get(BLOB_SERVER_HANDSHAKE_TIMEOUT))),
)
