"""The debug chat: its pages and the message/cancel services behind them (`chat`), the WebSocket consumer
(`consumers`) and the WebSocket tickets for API clients (`tickets`)."""
