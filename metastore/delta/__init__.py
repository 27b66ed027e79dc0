"""The Delta layer: each table of the warehouse is a standard Delta table any Delta reader opens.

One module per concept; import from the module that holds what you need:

- ``warehouse``: :class:`~metastore.delta.warehouse.Warehouse`, one root of Delta tables:
  creating and opening a table, every commit to it (chunk commits, a roll's seal and sweep), and
  finding a commit that returned in the log.
- ``append``: a chunk commit written straight to the log (one small file, put-if-absent).
- ``log``: reading the log's commit files: what streampart's commits say in their commitInfo,
  and whether the log holds every commit the metastore recorded.
- ``history``: a table's versions as ``streampart table history`` shows them.
- ``checkpoints``: a table's checkpoint interval and log retention, and checkpoints written in
  the background after commits.
- ``files``: the data files a snapshot lists, and writing, checking and removing them on disk.
- ``staging``: the staging area, where chunk files wait for and are placed by their commit.
- ``layout``: where a table's files live and how a partition's value names its directory.
- ``arrow``: a table's columns as Arrow schemas; older data conformed to the columns of now.
- ``metadata``: the log's schema at a version, and the ``metaData`` action of a schema change.
- ``errors``: how I/O, log and commit failures become streampart's errors.
"""
