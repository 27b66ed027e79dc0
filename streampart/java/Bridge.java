package streampart.sqlserver;

/**
 * What the SQL server's JVM asks of its Python driver (implemented there, called through py4j's
 * callback server): who may connect, and what a statement becomes.
 */
public interface Bridge {
    /** null: the user and password are accepted; else why not (one line). */
    String authenticate(String user, String password);

    /**
     * "OK:", the id of the statement's staged snapshots ({@link Statements}; empty if it reads none),
     * ":" and the statement Spark runs; or "ERR:" and why it is refused (one line). {@code client}
     * is what {@link Hooks#clientOf} says of the session.
     */
    String rewrite(String[] client, String sql, org.apache.spark.sql.SparkSession spark);
}
