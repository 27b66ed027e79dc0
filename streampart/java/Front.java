package streampart.sqlserver;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.List;

import org.apache.hive.service.auth.TSetIpAddressProcessor;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.rpc.thrift.TCLIService;
import org.apache.hive.service.rpc.thrift.TOpenSessionReq;
import org.apache.hive.service.rpc.thrift.TOpenSessionResp;
import org.apache.hive.service.rpc.thrift.TProtocolVersion;
import org.apache.hive.service.rpc.thrift.TStatus;
import org.apache.hive.service.rpc.thrift.TStatusCode;
import org.apache.thrift.TProcessor;
import org.apache.thrift.TProcessorFactory;
import org.apache.thrift.transport.TTransport;

/**
 * The Thrift service's front door: an OpenSession's settings are read here first, before Hive's
 * Thrift service acts on any of them (it reads a proxy user itself, and answers a refusal with its
 * whole stack). A setting {@link Gate#admit} does not accept is refused in one line, and the
 * request goes no further; every other call goes on to the Thrift service as it came.
 */
final class Front {
    private Front() {}

    /** The processors of {@code service}'s connections, as Hive makes them, in front of it. */
    static TProcessorFactory processors(TCLIService.Iface service) {
        TCLIService.Iface front = (TCLIService.Iface) Proxy.newProxyInstance(
            TCLIService.Iface.class.getClassLoader(),
            new Class<?>[] {TCLIService.Iface.class},
            (proxy, method, args) -> {
                if (method.getName().equals("OpenSession") && args != null && args[0] instanceof TOpenSessionReq req) {
                    try {
                        Gate.admit(req.getConfiguration());
                    } catch (HiveSQLException refused) {
                        return refusal(req, refused.getMessage());
                    }
                }
                try {
                    return method.invoke(service, args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
        return new TProcessorFactory(null) {
            @Override
            public TProcessor getProcessor(TTransport transport) {
                return new TSetIpAddressProcessor<>(front);
            }
        };
    }

    private static TOpenSessionResp refusal(TOpenSessionReq req, String why) {
        TStatus status = new TStatus(TStatusCode.ERROR_STATUS);
        String line = Extensions.firstLine(why);
        status.setErrorMessage(line);
        status.setSqlState("42000");
        status.setInfoMessages(List.of("*" + Extensions.Refused.class.getName() + ":" + line + ":0:-1"));
        TProtocolVersion version = req.getClient_protocol();
        return new TOpenSessionResp(status, version == null ? TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V1 : version);
    }
}
