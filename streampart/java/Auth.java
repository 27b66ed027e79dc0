package streampart.sqlserver;

import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/** HiveServer2's CUSTOM authentication: the password is a streampart API token, checked in Python. */
public final class Auth implements PasswdAuthenticationProvider {
    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        Bridge b = Hooks.bridge();
        if (b == null) {
            throw new AuthenticationException("the SQL server is starting; try again");
        }
        String refused = b.authenticate(user == null ? "" : user, password == null ? "" : password);
        if (refused != null) {
            throw new AuthenticationException(refused);
        }
    }
}
