"""The debug chat: its pages and the message/cancel services behind them (`chat`), the WebSocket consumer
(`consumers`), the WebSocket tickets for API clients (`tickets`, `urls`), and the page's templates and
script (`templates/chat/`, `static/chat/`)."""
