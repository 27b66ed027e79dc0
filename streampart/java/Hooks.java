package streampart.sqlserver;

import java.util.Map;

import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;

/** The running server's Python bridge and the Thrift server whose sessions it serves. */
public final class Hooks {
    private static volatile Bridge bridge;
    private static volatile SessionManager sessions;

    private Hooks() {}

    public static void install(Bridge b, Object server) {
        bridge = b;
        if (server instanceof org.apache.hive.service.CompositeService) {
            for (Service s : ((org.apache.hive.service.CompositeService) server).getServices()) {
                if (s instanceof CLIService) {
                    sessions = ((CLIService) s).getSessionManager();
                }
            }
        }
    }

    public static Bridge bridge() {
        return bridge;
    }

    /** The ids of the client sessions open now (empty before the server started). */
    public static String[] openSessions() {
        SessionManager manager = sessions;
        if (manager == null) {
            return new String[0];
        }
        SparkSQLOperationManager operations = (SparkSQLOperationManager) manager.getOperationManager();
        return operations.sessionToContexts().keySet().stream()
            .map(h -> h.getSessionId().toString())
            .toArray(String[]::new);
    }

    /** The client session {session id, user} a SparkSession serves; null for any other session. */
    public static String[] clientOf(SparkSession spark) {
        SessionManager manager = sessions;
        if (manager == null) {
            return null;
        }
        SparkSQLOperationManager operations = (SparkSQLOperationManager) manager.getOperationManager();
        for (Map.Entry<SessionHandle, SparkSession> e : operations.sessionToContexts().entrySet()) {
            if (e.getValue() == spark) {
                try {
                    String user = manager.getSession(e.getKey()).getUserName();
                    return new String[] {e.getKey().getSessionId().toString(), user};
                } catch (Exception missing) {
                    return null;
                }
            }
        }
        return null;
    }
}
