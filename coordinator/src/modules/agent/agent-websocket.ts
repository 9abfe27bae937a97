// The WebSocket class the coordinator's server uses. `ws` refuses a frame longer than its
// maxPayload by closing with 1009 (Message Too Big) before any handler sees it; agents are told
// TOO_LARGE (4413) for every frame past the limit, whatever its size, so the one documented code
// is used here too.
import { CloseCode, MAX_FRAME_BYTES } from '@deckhand/protocol';
import { WebSocket } from 'ws';

const MESSAGE_TOO_BIG = 1009;

export class AgentWebSocket extends WebSocket {
  override close(code?: number, data?: string | Buffer): void {
    if (code === MESSAGE_TOO_BIG && data === undefined) {
      super.close(CloseCode.TOO_LARGE, `frame larger than ${MAX_FRAME_BYTES} bytes`);
      return;
    }
    super.close(code, data);
  }
}
