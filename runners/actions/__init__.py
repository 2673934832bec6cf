"""Platform actions runs ask for (send, edit, react …) and the delivery of runs' results to where their
event came from: the requests, approvals and expiry (`platform_actions`), the delivery port the platforms
fill (`delivery`), the observers of requests that wait for approval (`observers`), and their REST API and
admin (`api`, `admin`)."""
