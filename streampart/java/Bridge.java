package streampart.sqlserver;

/**
 * What the SQL server's JVM asks of its Python driver (implemented there, called through py4j's
 * callback server): who may connect, and what a statement becomes.
 */
public interface Bridge {
    /** null: the user and password are accepted; else why not (one line). */
    String authenticate(String user, String password);

    /** "OK:" and the statement Spark runs instead, or "ERR:" and why it is refused (one line). */
    String rewrite(String session, String user, String sql, org.apache.spark.sql.SparkSession spark);
}
