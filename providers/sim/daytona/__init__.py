"""A local Daytona control plane (REST API, toolbox, Socket.IO events) over the vendor simulator."""
