"""What the integration suites share, each subject once: clusters and waiting (`cluster`), the fake
clock (`fake_clock`), pg_auto_failover formations (`formation`), fleets (`fleet`), streaming
replicas (`replicas`), inserting sessions (`inserts`), the earlier releases' scripts
(`releases`), two-master replication (`two_masters`), the extension's catalog (`extension_catalog`)
and the DBA guide's blocks (`dba_guide`). No test module imports another."""
