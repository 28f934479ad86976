// Prints the "Count" attribute of each JMX object name given, read from a running JVM on this
// machine (same user) through the Attach API, so the broker needs no JMX port configured.
// Used by bench/scale.py for the broker's per-topic BytesOutPerSec. A name the broker has not
// registered yet (no traffic on the topic) prints 0.
//
//   java bench/JmxCount.java <pid> <object name>...
import com.sun.tools.attach.VirtualMachine;
import javax.management.InstanceNotFoundException;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class JmxCount {
    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address = vm.startLocalManagementAgent();
        vm.detach();
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection server = c.getMBeanServerConnection();
            for (int i = 1; i < args.length; i++) {
                Object count;
                try {
                    count = server.getAttribute(new ObjectName(args[i]), "Count");
                } catch (InstanceNotFoundException e) {
                    count = 0L;
                }
                System.out.println(args[i] + "\t" + count);
            }
        }
    }
}
