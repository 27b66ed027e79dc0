package streampart.sqlserver;

/**
 * What the SQL server's JVM asks of its Python driver (implemented there, called through py4j's
 * callback server): who may connect, and what a client's statement may do.
 */
public interface Bridge {
    /** null: the user and password are accepted; else why not (one line). */
    String authenticate(String user, String password);

    /**
     * Decide a client's statement, as Spark's parser read it ({@link Reading}): {@code kind} is
     * {@code query} ({@code args}: its table references, {@link Reading#refs}), {@code use},
     * {@code show_schemas}, {@code show_tables} or {@code describe} ({@code args}: the name parts);
     * {@code used} are the namespaces of the statement's leading {@code USE ns;} statements, in order.
     *
     * <p>Answers "OK:", the id of the statement's staged snapshots ({@link Statements}), ":" and, for
     * all but a query, the statement Spark runs instead (a listing, as literal rows); or "ERR:" and
     * why it is refused (one line). {@code client} is what {@link Hooks#clientOf} says of the session.
     */
    String decide(String[] client, String kind, String[] used, String[] args, org.apache.spark.sql.SparkSession spark);

    /** null if {@code client}'s session may go on (its token is still valid), else why not (one line). */
    String check(String[] client);
}
